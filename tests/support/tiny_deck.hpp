#pragma once
// The tiny model the runtime's equality tests train, one pipeline stage per rank of MPI_COMM_WORLD (times
// `virtual_chunks`): 2p microbatches of 2 sequences of 16 tokens, 2p layers, d_model 32, 2 heads, 3 steps, no
// trace, its run folder a temporary one named after `name` and p (overwritten). `overrides` come last and win:
// "run.steps=4", "trace.enabled=true", "schedule.kind=zb-h1", ...
#include <filesystem>
#include <string>
#include <vector>
#include "conductor/config/deck.hpp"
#include "mpi_world.hpp"

namespace conductor::test_support {

inline config::Deck tiny_run_deck(const std::string& name, int virtual_chunks,
                                  const std::vector<std::string>& overrides) {
  const int p = world_size();
  config::LoadOptions o;
  o.command = config::Command::Run;
  o.world_size = p;
  o.source_name = name;
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("conductor-" + name + "-" + std::to_string(p));
  o.overrides = {"parallel.pipeline=" + std::to_string(p),
                 "parallel.virtual=" + std::to_string(virtual_chunks),
                 "parallel.microbatches=" + std::to_string(2 * p),
                 "parallel.microbatch_size=2",
                 "model.n_layers=" + std::to_string(2 * p),
                 "model.d_model=32",
                 "model.n_heads=2",
                 "model.seq_len=16",
                 "run.steps=3",
                 "run.output=" + out.string(),
                 "run.overwrite=true",
                 "trace.enabled=false"};
  o.overrides.insert(o.overrides.end(), overrides.begin(), overrides.end());
  return config::parse_deck("", o);
}

}  // namespace conductor::test_support
