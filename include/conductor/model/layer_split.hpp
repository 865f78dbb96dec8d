#pragma once
// Which layers each virtual stage holds. The model is split over S = parallel.pipeline x parallel.virtual virtual
// stages (model.layers_per_stage, or as even as possible); virtual stage 0 also holds the embeddings and virtual
// stage S-1 the final LayerNorm, the LM head and the loss. Which virtual stages a rank holds is the schedule's
// choice (sched::Schedule::stage_of), passed to StageModel.
#include <vector>

#include "conductor/plan/plan.hpp"

namespace conductor::model {

// Layers held by each of the num_virtual_stages virtual stages. Throws InputError if the deck's explicit list
// does not fit (wrong length or sum) or there are fewer layers than virtual stages without an explicit list.
std::vector<int> split_layers(const plan::ModelDims& model, int num_virtual_stages);

// Global index of the first layer of virtual stage vs under `split`.
int first_layer(const std::vector<int>& split, int vs);

}  // namespace conductor::model
