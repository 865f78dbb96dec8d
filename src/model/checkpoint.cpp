// HDF5 checkpoints, one file per virtual stage:
//   /meta/{step, virtual_stage, num_virtual_stages, first_layer, n_layers}  int64 scalars
//   /meta/rng_state  uint64[2] = (run.seed, step): the whole data stream state (tokens are a pure function of
//                    (seed, step, microbatch)); the model has no other random state after initialisation
//   /deck            the resolved deck (YAML text)
//   /params/<tensor>, /adam_m/<tensor>, /adam_v/<tensor>   fp32, the tensor's shape
#include <hdf5.h>

#include <filesystem>
#include <sstream>

#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"

namespace conductor::model {

namespace {

// RAII owner of an HDF5 identifier.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() {
    if (id_ >= 0) close_(id_);
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Runs an HDF5 open without printing HDF5's error stack (a failure becomes our own message).
template <class F>
hid_t quietly(F f) {
  hid_t id = -1;
  H5E_BEGIN_TRY { id = f(); }
  H5E_END_TRY;
  return id;
}

void check(herr_t status, const std::string& what, const std::string& file) {
  if (status < 0) throw Error("checkpoint '" + file + "': failed to " + what);
}

void write_i64(hid_t group, const char* name, long long value, const std::string& file) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id ds(H5Dcreate2(group, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw Error("checkpoint '" + file + "': cannot create " + name);
  check(H5Dwrite(ds.get(), H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), std::string("write ") + name,
        file);
}

long long read_i64(hid_t file_id, const std::string& path, const std::string& file) {
  long long value = 0;
  H5Id ds(quietly([&] { return H5Dopen2(file_id, path.c_str(), H5P_DEFAULT); }), H5Dclose);
  if (!ds.ok()) throw InputError("checkpoint '" + file + "' has no dataset " + path + " (not a conductor checkpoint?)");
  check(H5Dread(ds.get(), H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), "read " + path, file);
  return value;
}

std::string shape_text(const std::vector<hsize_t>& s) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < s.size(); i++) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

const char* group_name(Buffer b) {
  switch (b) {
    case Buffer::Params: return "params";
    case Buffer::AdamM: return "adam_m";
    case Buffer::AdamV: return "adam_v";
    case Buffer::Grads: return "grads";
  }
  return "";
}

}  // namespace

std::string StageModel::checkpoint_file(const std::string& dir, int vs) {
  return (std::filesystem::path(dir) / ("vstage_" + std::to_string(vs) + ".h5")).string();
}

void StageModel::save_checkpoint(const std::string& dir, int steps_done) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("checkpoint: cannot create folder '" + dir + "': " + ec.message());
  const std::string& deck_text = plan_.deck_yaml;
  for (int vs : held_) {
    const std::string file = checkpoint_file(dir, vs);
    const std::string tmp = file + ".tmp";  // written then renamed, so a crash never leaves half a checkpoint
    {
      H5Id f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      if (!f.ok()) throw Error("checkpoint: cannot create '" + tmp + "'");
      {
        H5Id meta(H5Gcreate2(f.get(), "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        write_i64(meta.get(), "step", steps_done, file);
        write_i64(meta.get(), "virtual_stage", vs, file);
        write_i64(meta.get(), "num_virtual_stages", num_vs_, file);
        write_i64(meta.get(), "first_layer", first_layer(vs), file);
        write_i64(meta.get(), "n_layers", num_layers(vs), file);
        const unsigned long long rng[2] = {plan_.run.seed, static_cast<unsigned long long>(steps_done)};
        const hsize_t two = 2;
        H5Id space(H5Screate_simple(1, &two, nullptr), H5Sclose);
        H5Id ds(H5Dcreate2(meta.get(), "rng_state", H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
        check(H5Dwrite(ds.get(), H5T_NATIVE_ULLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng), "write rng_state", file);
      }
      {
        H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
        check(H5Tset_size(type.get(), std::max<std::size_t>(1, deck_text.size())), "size deck string", file);
        H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
        H5Id ds(H5Dcreate2(f.get(), "deck", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
        check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, deck_text.c_str()), "write deck", file);
      }
      for (Buffer which : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
        const std::vector<float> host = read(vs, which);
        H5Id g(H5Gcreate2(f.get(), group_name(which), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        for (const auto& t : tensors(vs)) {
          std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
          H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
          H5Id ds(
              H5Dcreate2(g.get(), t.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
          if (!ds.ok()) throw Error("checkpoint '" + file + "': cannot create dataset " + t.name);
          check(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data() + t.offset),
                "write " + t.name, file);
        }
      }
    }
    std::filesystem::rename(tmp, file, ec);
    if (ec) throw Error("checkpoint: cannot rename '" + tmp + "' to '" + file + "': " + ec.message());
  }
}

int StageModel::load_checkpoint(const std::string& dir) {
  long long steps = -1;
  for (int vs : held_) {
    const std::string file = checkpoint_file(dir, vs);
    if (!std::filesystem::is_regular_file(file)) {
      throw InputError("checkpoint.resume = '" + dir + "': missing file '" + file + "' for virtual stage " +
                       std::to_string(vs));
    }
    H5Id f(quietly([&] { return H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT); }), H5Fclose);
    if (!f.ok()) throw InputError("checkpoint '" + file + "' is not a readable HDF5 file");
    const long long nvs = read_i64(f.get(), "/meta/num_virtual_stages", file);
    const long long first = read_i64(f.get(), "/meta/first_layer", file);
    const long long nl = read_i64(f.get(), "/meta/n_layers", file);
    if (nvs != num_vs_ || first != first_layer(vs) || nl != num_layers(vs)) {
      throw InputError("checkpoint '" + file + "' holds layers " + std::to_string(first) + ".." +
                       std::to_string(first + nl - 1) + " of a " + std::to_string(nvs) +
                       "-virtual-stage split; this model's virtual stage " + std::to_string(vs) + " holds layers " +
                       std::to_string(first_layer(vs)) + ".." + std::to_string(first_layer(vs) + num_layers(vs) - 1) +
                       " of " + std::to_string(num_vs_));
    }
    const long long step = read_i64(f.get(), "/meta/step", file);
    if (steps >= 0 && step != steps) {
      throw InputError("checkpoint folder '" + dir + "' mixes steps " + std::to_string(steps) + " and " +
                       std::to_string(step) + " ('" + file + "')");
    }
    steps = step;
    {
      unsigned long long rng[2] = {0, 0};
      H5Id ds(quietly([&] { return H5Dopen2(f.get(), "/meta/rng_state", H5P_DEFAULT); }), H5Dclose);
      if (!ds.ok()) throw InputError("checkpoint '" + file + "' has no dataset /meta/rng_state");
      check(H5Dread(ds.get(), H5T_NATIVE_ULLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng), "read rng_state", file);
      if (rng[0] != plan_.run.seed) {
        throw InputError("checkpoint '" + file + "' was written with run.seed = " + std::to_string(rng[0]) +
                         " but the deck has run.seed = " + std::to_string(plan_.run.seed) +
                         "; the data stream would not continue");
      }
    }
    for (Buffer which : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
      std::vector<float> host(read(vs, which).size());
      for (const auto& t : tensors(vs)) {
        const std::string path = std::string("/") + group_name(which) + "/" + t.name;
        H5Id ds(quietly([&] { return H5Dopen2(f.get(), path.c_str(), H5P_DEFAULT); }), H5Dclose);
        if (!ds.ok()) throw InputError("checkpoint '" + file + "' has no dataset " + path);
        H5Id space(H5Dget_space(ds.get()), H5Sclose);
        const int rank = H5Sget_simple_extent_ndims(space.get());
        std::vector<hsize_t> have(std::max(rank, 0));
        if (rank > 0) H5Sget_simple_extent_dims(space.get(), have.data(), nullptr);
        const std::vector<hsize_t> want(t.shape.begin(), t.shape.end());
        if (have != want) {
          throw InputError("checkpoint '" + file + "': dataset " + path + " has shape " + shape_text(have) +
                           " but this model needs " + shape_text(want) +
                           " (the checkpoint is from another model shape)");
        }
        check(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data() + t.offset),
              "read " + path, file);
      }
      write(vs, which, host);
    }
  }
  return static_cast<int>(steps);
}

}  // namespace conductor::model
