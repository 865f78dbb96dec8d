// The split of the model's layers over the virtual stages (layer_split.hpp).
#include "conductor/model/layer_split.hpp"

#include <string>

#include "conductor/util/error.hpp"

namespace conductor::model {

namespace {

// model.layers_per_stage as given: one entry per virtual stage, each >= 0, summing to model.n_layers.
std::vector<int> checked_explicit_split(const plan::ModelDims& model, int num_virtual_stages) {
  const auto& explicit_list = model.layers_per_stage;
  if (static_cast<int>(explicit_list.size()) != num_virtual_stages) {
    throw InputError("model.layers_per_stage has " + std::to_string(explicit_list.size()) + " entries but there are " +
                     std::to_string(num_virtual_stages) + " virtual stages");
  }
  long long sum = 0;
  for (int l : explicit_list) {
    if (l < 0) throw InputError("model.layers_per_stage: entries must be >= 0, got " + std::to_string(l));
    sum += l;
  }
  if (sum != model.n_layers) {
    throw InputError("model.layers_per_stage sums to " + std::to_string(sum) +
                     " but model.n_layers = " + std::to_string(model.n_layers));
  }
  return explicit_list;
}

}  // namespace

std::vector<int> split_layers(const plan::ModelDims& model, int num_virtual_stages) {
  const int L = model.n_layers;
  if (num_virtual_stages < 1) throw InputError("model: number of virtual stages must be >= 1");
  if (!model.layers_per_stage.empty()) return checked_explicit_split(model, num_virtual_stages);
  if (L < num_virtual_stages) {
    throw InputError("model.n_layers = " + std::to_string(L) + " is fewer than the " +
                     std::to_string(num_virtual_stages) +
                     " virtual stages; add layers or list model.layers_per_stage explicitly");
  }
  std::vector<int> out(num_virtual_stages, L / num_virtual_stages);
  for (int i = 0; i < L % num_virtual_stages; i++) out[i]++;
  return out;
}

int first_layer(const std::vector<int>& split, int vs) {
  int first = 0;
  for (int i = 0; i < vs; i++) first += split[i];
  return first;
}

}  // namespace conductor::model
