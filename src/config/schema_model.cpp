// Deck keys of the trainer: model, data, optim, checkpoint.
#include "conductor/config/schema.hpp"

namespace conductor::config {

void add_model_fields(std::vector<Field>& f) {
  f.push_back(field<int>("model.vocab", [](Deck& d) -> auto& { return d.model.vocab; },
                         "Vocabulary size (byte-level data uses 256).")
                  .range(2, 1 << 24));
  f.push_back(field<int>("model.seq_len", [](Deck& d) -> auto& { return d.model.seq_len; },
                         "Sequence length T.")
                  .range(1, 1 << 20));
  f.push_back(field<int>("model.d_model", [](Deck& d) -> auto& { return d.model.d_model; }, "Model width C.")
                  .range(1, 1 << 20));
  f.push_back(field<int>("model.n_heads", [](Deck& d) -> auto& { return d.model.n_heads; },
                         "Attention heads; must divide model.d_model.")
                  .range(1, 4096));
  f.push_back(field<int>("model.n_layers", [](Deck& d) -> auto& { return d.model.n_layers; },
                         "Transformer layers, split over pipeline stages and virtual chunks.")
                  .range(1, 100000));
  f.push_back(field<int>("model.mlp_ratio", [](Deck& d) -> auto& { return d.model.mlp_ratio; },
                         "MLP hidden width as a multiple of model.d_model.")
                  .range(1, 64));
  f.push_back(field<unsigned long long>("model.init_seed", [](Deck& d) -> auto& { return d.model.init_seed; },
                                        "Seed of the weight initialisation."));
}

void finalize_model(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  const auto& m = deck.model;
  if (m.d_model % m.n_heads != 0) {
    problems.push_back(options.source_name + ": model.n_heads = " + std::to_string(m.n_heads) +
                       " does not divide model.d_model = " + std::to_string(m.d_model));
  }
}

}  // namespace conductor::config
