// HDF5 checkpoint files, one per virtual stage, inside a step folder (model/checkpoint.hpp has the layout):
//   /meta/{step, virtual_stage, num_virtual_stages, first_layer, n_layers}  int64 scalars
//   /meta/rng_state  uint64[2] = (run.seed, step): the whole data stream state (tokens are a pure function of
//                    (seed, step, microbatch)); the model has no other random state after initialisation
//   /deck            the resolved deck (YAML text)
//   /params/<tensor>, /adam_m/<tensor>, /adam_v/<tensor>   fp32, the tensor's shape
// Each file is built in memory (HDF5's core driver) and written with checked POSIX calls and an fsync, and read
// back whole and checked against the manifest's CRC-32 before HDF5 parses it: HDF5 never does disk I/O here,
// so a full disk or a corrupt file is one clear error, never HDF5's error stack or a crash at close. The one
// exception reads: check_checkpoint_fits (conductor validate) opens the files read-only on disk for their metadata
// and shapes, so that it need not read every weight (the CRC-32 stays the loader's check).
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <utility>

#include "conductor/model/checkpoint.hpp"
#include "conductor/model/layer_split.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/hdf5.hpp"

namespace conductor::model {

namespace {

using hdf5::Handle;
using hdf5::Silence;

// A file access property list of the core (in-memory) driver that never touches the disk.
hid_t memory_fapl() {
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 20, false) < 0) {
    if (fapl >= 0) H5Pclose(fapl);
    throw Error("checkpoint: cannot set up HDF5's in-memory driver");
  }
  return fapl;
}

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
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle ds(H5Dcreate2(group, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw Error("checkpoint '" + file + "': cannot create " + name);
  check(H5Dwrite(ds.get(), H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), std::string("write ") + name,
        file);
}

long long read_i64(hid_t file_id, const std::string& path, const std::string& file) {
  long long value = 0;
  Handle ds(quietly([&] { return H5Dopen2(file_id, path.c_str(), H5P_DEFAULT); }), H5Dclose);
  if (!ds.valid())
    throw InputError("checkpoint '" + file + "' has no dataset " + path + " (not a conductor checkpoint?)");
  // A file the manifest vouched for whose dataset is not an integer scalar: not one this build wrote (exit 2).
  if (quietly([&] { return H5Dread(ds.get(), H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value); }) < 0)
    throw InputError("checkpoint '" + file + "': dataset " + path + " is not an integer (not a conductor checkpoint?)");
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

// The HDF5 image of one virtual stage's checkpoint file, built in memory.
std::vector<unsigned char> StageModel::checkpoint_image(int vs, int steps_done, const std::string& file) const {
  Silence quiet;
  const std::string& deck_text = plan_.deck_yaml;
  Handle fapl(memory_fapl(), H5Pclose);
  const std::string label = "in-memory image of " + file;  // never touches the disk (no backing store)
  Handle f(H5Fcreate(label.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!f.valid()) throw Error("checkpoint '" + file + "': cannot create the in-memory HDF5 file");
  {
    Handle meta(H5Gcreate2(f.get(), "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!meta.valid()) throw Error("checkpoint '" + file + "': cannot create group meta");
    write_i64(meta.get(), "step", steps_done, file);
    write_i64(meta.get(), "virtual_stage", vs, file);
    write_i64(meta.get(), "num_virtual_stages", num_vs_, file);
    write_i64(meta.get(), "first_layer", first_layer(vs), file);
    write_i64(meta.get(), "n_layers", num_layers(vs), file);
    const unsigned long long rng[2] = {plan_.run.seed, static_cast<unsigned long long>(steps_done)};
    const hsize_t two = 2;
    Handle space(H5Screate_simple(1, &two, nullptr), H5Sclose);
    Handle ds(H5Dcreate2(meta.get(), "rng_state", H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
    check(H5Dwrite(ds.get(), H5T_NATIVE_ULLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng), "write rng_state", file);
  }
  {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    check(H5Tset_size(type.get(), std::max<std::size_t>(1, deck_text.size())), "size deck string", file);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle ds(H5Dcreate2(f.get(), "deck", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, deck_text.c_str()), "write deck", file);
  }
  for (Buffer which : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
    const std::vector<float> host = read(vs, which);
    Handle g(H5Gcreate2(f.get(), group_name(which), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!g.valid()) throw Error("checkpoint '" + file + "': cannot create group " + group_name(which));
    for (const auto& t : tensors(vs)) {
      std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
      Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
      Handle ds(H5Dcreate2(g.get(), t.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
      if (!ds.valid()) throw Error("checkpoint '" + file + "': cannot create dataset " + t.name);
      check(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data() + t.offset),
            "write " + t.name, file);
    }
  }
  check(H5Fflush(f.get(), H5F_SCOPE_GLOBAL), "flush", file);
  const ssize_t size = H5Fget_file_image(f.get(), nullptr, 0);
  if (size <= 0) throw Error("checkpoint '" + file + "': cannot get the HDF5 file image");
  std::vector<unsigned char> image(static_cast<std::size_t>(size));
  if (H5Fget_file_image(f.get(), image.data(), image.size()) != size)
    throw Error("checkpoint '" + file + "': cannot copy the HDF5 file image");
  check(f.reset(), "close", file);
  return image;
}

std::vector<CheckpointFile> StageModel::save_checkpoint(const std::string& dir, int steps_done) const {
  std::vector<CheckpointFile> files;
  for (int vs : held_) {
    const std::string file = checkpoint_file(dir, vs);
    const std::vector<unsigned char> image = checkpoint_image(vs, steps_done, file);
    try {
      util::write_file_durably(file, image.data(), image.size());
    } catch (const Error& e) {
      throw Error("checkpoint step " + std::to_string(steps_done) + ": " + e.what());
    }
    files.push_back(
        {std::filesystem::path(file).filename().string(), util::crc32(image.data(), image.size()), image.size()});
  }
  return files;
}

namespace {

// The bytes of one checkpoint file, checked against its manifest entry before anything parses them.
// The file a manifest lists is there, a file: InputError naming both.
void check_listed_file(const std::string& file, const std::string& dir) {
  if (!std::filesystem::is_regular_file(file)) {
    std::error_code ec;
    throw InputError("checkpoint file '" + file + "' " +
                     (std::filesystem::exists(file, ec) ? "is not a regular file (a folder?)" : "is missing") +
                     " (listed in '" + (std::filesystem::path(dir) / kManifestName).string() + "')");
  }
}

// A listed file's size against its manifest entry.
void check_listed_size(const std::string& file, std::uintmax_t bytes, const CheckpointFile& entry,
                       const std::string& dir) {
  if (bytes != entry.bytes) {
    throw InputError("checkpoint file '" + file + "' has " + std::to_string(bytes) + " bytes but '" +
                     (std::filesystem::path(dir) / kManifestName).string() + "' says " + std::to_string(entry.bytes) +
                     " (truncated, or a file from another step)");
  }
}

std::vector<unsigned char> verified_bytes(const std::string& file, const CheckpointFile& entry,
                                          const std::string& dir) {
  const std::string manifest = (std::filesystem::path(dir) / kManifestName).string();
  check_listed_file(file, dir);
  std::vector<unsigned char> bytes;
  try {
    bytes = util::read_file_bytes(file);
  } catch (const Error& e) {
    throw InputError(std::string("checkpoint: ") + e.what());
  }
  check_listed_size(file, bytes.size(), entry, dir);
  const std::uint32_t crc = util::crc32(bytes.data(), bytes.size());
  if (crc != entry.crc32) {
    throw InputError("checkpoint file '" + file + "' is corrupt: its CRC-32 is " + util::crc32_hex(crc) + " but '" +
                     manifest + "' says " + util::crc32_hex(entry.crc32) +
                     " (changed bytes, or a file from another step)");
  }
  return bytes;
}

}  // namespace

std::string checkpoint_deck(const std::string& step_dir) {
  Silence quiet;
  const std::string file = StageModel::checkpoint_file(step_dir, 0);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return "";
  // Read before the files are verified: any problem here is left to the loader's checks, which name it.
  Handle f(quietly([&] { return H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT); }), H5Fclose);
  if (!f.valid()) return "";
  Handle ds(quietly([&] { return H5Dopen2(f.get(), "/deck", H5P_DEFAULT); }), H5Dclose);
  if (!ds.valid()) return "";
  Handle type(H5Dget_type(ds.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return "";
  const std::size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (64u << 20)) return "";
  std::string text(size, '\0');
  if (quietly([&] { return H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()); }) < 0) return "";
  text.resize(std::strlen(text.c_str()));
  return text;
}

namespace {

// What a virtual stage's checkpoint file must hold for this run's model: its place in the split, its step, the
// run's seed and every dataset's shape (the loader's and validate's one check).
struct StageLayout {
  int num_vs = 0, vs = 0, first_layer = 0, n_layers = 0;
  const std::vector<TensorInfo>* tensors = nullptr;
  unsigned long long seed = 0;
};

void check_stage_file(hid_t fid, const std::string& file, const StageLayout& want, int manifest_step) {
  const long long nvs = read_i64(fid, "/meta/num_virtual_stages", file);
  const long long first = read_i64(fid, "/meta/first_layer", file);
  const long long nl = read_i64(fid, "/meta/n_layers", file);
  if (nvs != want.num_vs || first != want.first_layer || nl != want.n_layers) {
    // "layers 2..4", or "no layer" for a stage of none (a 0 in model.layers_per_stage).
    const auto layers = [](long long from, long long n) {
      return n <= 0 ? std::string("no layer") : "layers " + std::to_string(from) + ".." + std::to_string(from + n - 1);
    };
    throw InputError("checkpoint '" + file + "' holds " + layers(first, nl) + " of a " + std::to_string(nvs) +
                     "-virtual-stage split; this model's virtual stage " + std::to_string(want.vs) + " holds " +
                     layers(want.first_layer, want.n_layers) + " of " + std::to_string(want.num_vs) +
                     " (model.n_layers or model.layers_per_stage differ from the run that wrote it)");
  }
  const long long step = read_i64(fid, "/meta/step", file);
  if (step != manifest_step) {
    throw InputError("checkpoint '" + file + "' holds step " + std::to_string(step) + " but its manifest says step " +
                     std::to_string(manifest_step) + " (a file from another step)");
  }
  {
    unsigned long long rng[2] = {0, 0};
    Handle ds(quietly([&] { return H5Dopen2(fid, "/meta/rng_state", H5P_DEFAULT); }), H5Dclose);
    if (!ds.valid()) throw InputError("checkpoint '" + file + "' has no dataset /meta/rng_state");
    check(H5Dread(ds.get(), H5T_NATIVE_ULLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng), "read rng_state", file);
    if (rng[0] != want.seed) {
      throw InputError("checkpoint '" + file + "' was written with run.seed = " + std::to_string(rng[0]) +
                       " but the deck has run.seed = " + std::to_string(want.seed) +
                       "; the data stream would not continue");
    }
  }
  for (Buffer which : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
    for (const auto& t : *want.tensors) {
      const std::string path = std::string("/") + group_name(which) + "/" + t.name;
      Handle ds(quietly([&] { return H5Dopen2(fid, path.c_str(), H5P_DEFAULT); }), H5Dclose);
      if (!ds.valid()) throw InputError("checkpoint '" + file + "' has no dataset " + path);
      Handle space(H5Dget_space(ds.get()), H5Sclose);
      const int rank = H5Sget_simple_extent_ndims(space.get());
      std::vector<hsize_t> have(std::max(rank, 0));
      if (rank > 0) H5Sget_simple_extent_dims(space.get(), have.data(), nullptr);
      const std::vector<hsize_t> want_shape(t.shape.begin(), t.shape.end());
      if (have != want_shape) {
        throw InputError("checkpoint '" + file + "': dataset " + path + " has shape " + shape_text(have) +
                         " but this model needs " + shape_text(want_shape) +
                         " (the checkpoint is from another model shape)");
      }
    }
  }
}

// A manifest's virtual-stage count against this run's.
void check_stage_count(const Manifest& manifest, const std::string& dir, int num_vs) {
  if (manifest.num_virtual_stages != num_vs) {
    throw InputError("checkpoint '" + dir + "' was written by a run split into " +
                     std::to_string(manifest.num_virtual_stages) +
                     (manifest.num_virtual_stages == 1 ? " virtual stage" : " virtual stages") + " (pipeline " +
                     std::to_string(manifest.pipeline) + " x virtual " + std::to_string(manifest.virtual_chunks) +
                     "); this run has " + std::to_string(num_vs));
  }
}

}  // namespace

int StageModel::load_checkpoint(const std::string& dir) {
  Silence quiet;
  const Manifest manifest = read_manifest(dir);
  check_stage_count(manifest, dir, num_vs_);
  for (int vs : held_) {
    const std::string file = checkpoint_file(dir, vs);
    const CheckpointFile& entry = manifest_entry(manifest, dir, std::filesystem::path(file).filename().string());
    std::vector<unsigned char> bytes = verified_bytes(file, entry, dir);
    Handle fapl(memory_fapl(), H5Pclose);
    check(H5Pset_file_image(fapl.get(), bytes.data(), bytes.size()), "hand the file image to HDF5", file);
    // The core driver refuses a name that exists on disk when given an image: the name is only a label here.
    const std::string label = "in-memory image of " + file;
    Handle f(quietly([&] { return H5Fopen(label.c_str(), H5F_ACC_RDONLY, fapl.get()); }), H5Fclose);
    if (!f.valid()) throw InputError("checkpoint '" + file + "' is not a readable HDF5 file");
    load_stage(vs, f.get(), file, manifest.step);
  }
  return manifest.step;
}

// Restores one virtual stage from its open checkpoint file (already verified against the manifest).
void StageModel::load_stage(int vs, long long file_id, const std::string& file, int manifest_step) {
  const hid_t fid = static_cast<hid_t>(file_id);
  check_stage_file(fid, file, {num_vs_, vs, first_layer(vs), num_layers(vs), &tensors(vs), plan_.run.seed},
                   manifest_step);
  for (Buffer which : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
    std::vector<float> host(read(vs, which).size());
    for (const auto& t : tensors(vs)) {
      const std::string path = std::string("/") + group_name(which) + "/" + t.name;
      Handle ds(quietly([&] { return H5Dopen2(fid, path.c_str(), H5P_DEFAULT); }), H5Dclose);
      check(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data() + t.offset), "read " + path,
            file);
    }
    write(vs, which, host);
  }
}

void check_checkpoint_fits(const plan::Plan& plan, int num_virtual_stages, const std::string& dir) {
  Silence quiet;
  const Manifest manifest = read_manifest(dir);
  check_stage_count(manifest, dir, num_virtual_stages);
  const std::vector<int> split = split_layers(plan.model, num_virtual_stages);
  for (int vs = 0; vs < num_virtual_stages; ++vs) {
    const std::string file = StageModel::checkpoint_file(dir, vs);
    const CheckpointFile& entry = manifest_entry(manifest, dir, std::filesystem::path(file).filename().string());
    check_listed_file(file, dir);
    std::error_code ec;
    check_listed_size(file, std::filesystem::file_size(file, ec), entry, dir);
    Handle f(quietly([&] { return H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT); }), H5Fclose);
    if (!f.valid()) throw InputError("checkpoint '" + file + "' is not a readable HDF5 file");
    const std::vector<TensorInfo> tensors = virtual_stage_tensors(plan, num_virtual_stages, vs);
    check_stage_file(f.get(), file,
                     {num_virtual_stages, vs, first_layer(split, vs), split[vs], &tensors, plan.run.seed},
                     manifest.step);
  }
}

}  // namespace conductor::model
