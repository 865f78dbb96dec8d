// Deck keys of the core: backend, run, parallel, trace.
#include "conductor/config/schema.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

void add_core_fields(std::vector<Field>& f) {
  f.push_back(field<std::string>(
                  "backend", [](Deck & d) -> auto& { return d.backend; },
                  "Where the math runs: `cpu` (our OpenBLAS/OpenMP trainer), `cuda` (one GPU per rank, "
                  "chosen by the node-local rank; needs a build with CUDA) or `emulated` (no math; each "
                  "op takes its cost-model time).")
                  .one_of({"cpu", "cuda", "emulated"}));
  f.push_back(field<std::string>(
      "run.name", [](Deck & d) -> auto& { return d.run.name; },
      "Name of the run, one folder name (no '/'); the default output folder is `runs/<name>`."));
  f.push_back(
      field<int>(
          "run.steps", [](Deck & d) -> auto& { return d.run.steps; }, "Training steps (or simulated steps) to run.")
          .range(1, 1e9));
  f.push_back(field<unsigned long long>(
      "run.seed", [](Deck & d) -> auto& { return d.run.seed; },
      "Master seed: data order and every derived random stream."));
  f.push_back(field<std::string>(
      "run.output", [](Deck & d) -> auto& { return d.run.output; },
      "Output folder for resolved.yaml, trace.h5 and summary.json; empty means "
      "`runs/<run.name>` (`conductor simulate`: `runs/<run.name>-sim`, `conductor train-policy`: "
      "`runs/<run.name>-policy`, so neither meets a measured run's results)."));
  f.push_back(field<bool>(
      "run.overwrite", [](Deck & d) -> auto& { return d.run.overwrite; },
      "Allow writing into a run.output (or checkpoint.path) that already holds another run's results "
      "(trace.h5, summary.json, metrics.jsonl, resolved.yaml, a trained policy, checkpoints); false: such a "
      "command is refused before it writes anything. Resuming (checkpoint.resume set) continues its own run's "
      "folder (its resolved.yaml this deck but for run.steps, run.output, run.overwrite, run.log_every, "
      "run.memory_limit_gb and checkpoint.*) and "
      "checkpoint root; "
      "simulate may rewrite a folder holding only its own results of this very deck (run.output and run.overwrite "
      "aside); train-policy replaces a "
      "trained policy (even of this very deck) only with run.overwrite. It replaces the files this command "
      "writes; another command's files there stay (a simulation's summary.json beside a trained policy.pt): "
      "choose a folder per command to keep them apart."));
  f.push_back(field<double>(
                  "run.memory_limit_gb", [](Deck & d) -> auto& { return d.run.memory_limit_gb; },
                  "Size guard: a deck whose estimated memory (simulator: schedule, engine state and "
                  "events; run: parameters, optimizer state, activations and a step's posted receives per "
                  "rank) exceeds this many GB is refused before anything is allocated; 0: the machine's "
                  "available memory (MemAvailable), or what the job's memory cgroup has left where that is "
                  "less (Slurm's --mem). A process's ulimit -v bounds it too.")
                  .range(0, 1e9));
  f.push_back(field<int>(
                  "run.log_every", [](Deck & d) -> auto& { return d.run.log_every; },
                  "`conductor run`: print a step line every this many steps (the last step always); "
                  "metrics.jsonl in run.output gets every step regardless.")
                  .range(1, 1e9));
  f.push_back(field<int>(
                  "parallel.pipeline", [](Deck & d) -> auto& { return d.parallel.pipeline; },
                  "Pipeline stages p. For `conductor run` this must equal the number of MPI ranks.")
                  .range(1, 65536));
  f.push_back(field<int>(
                  "parallel.virtual", [](Deck & d) -> auto& { return d.parallel.virtual_chunks; },
                  "Virtual chunks v per rank (interleaved schedules use v >= 2; zb-v uses 2).")
                  .range(1, 64));
  f.push_back(field<int>(
                  "parallel.microbatches", [](Deck & d) -> auto& { return d.parallel.microbatches; },
                  "Microbatches m per training step.")
                  .range(1, 1 << 20));
  f.push_back(field<int>(
                  "parallel.microbatch_size", [](Deck & d) -> auto& { return d.parallel.microbatch_size; },
                  "Sequences per microbatch.")
                  .range(1, 1 << 20));
  f.push_back(field<bool>(
      "trace.enabled", [](Deck & d) -> auto& { return d.trace.enabled; },
      "Write `<run.output>/trace.h5` with every op of every rank at every step."));
  f.push_back(field<bool>(
      "trace.comm_events", [](Deck & d) -> auto& { return d.trace.comm_events; },
      "Also record send/receive events in the trace."));
  f.push_back(field<bool>(
      "cuda.tf32", [](Deck & d) -> auto& { return d.cuda.tf32; }, "backend cuda: fp32 GEMMs on TF32 tensor cores."));
  f.push_back(field<bool>(
      "cuda.allow_gpu_sharing", [](Deck & d) -> auto& { return d.cuda.allow_gpu_sharing; },
      "backend cuda: allow more ranks than GPUs on a node (they share GPUs round-robin); "
      "otherwise that is an error on every rank."));
  f.push_back(field<std::string>(
                  "cuda.transport", [](Deck & d) -> auto& { return d.cuda.transport; },
                  "backend cuda: how tensors travel between stages. nccl: NCCL point-to-point "
                  "between GPU buffers (one GPU per rank); mpi: device->host->MPI->host->device "
                  "copies (ranks that share a GPU, or no NCCL network); auto: nccl unless ranks of a "
                  "node share a GPU.")
                  .one_of({"auto", "nccl", "mpi"}));
  f.push_back(field<int>(
                  "cuda.queue_depth", [](Deck & d) -> auto& { return d.cuda.queue_depth; },
                  "backend cuda: ops a rank keeps queued on its GPU. 2 keeps the GPU busy while the host "
                  "picks the next op (which it then picks one op early); 1 picks exactly when the GPU is "
                  "free, as the simulator's arbiter does, at the cost of a host round trip between ops.")
                  .range(1, 8));
  f.push_back(field<double>(
                  "runtime.watchdog_s", [](Deck & d) -> auto& { return d.runtime.watchdog_s; },
                  "Seconds a rank waits for a message from a peer (an op's input, a peer joining an "
                  "end-of-step collective, or the set-up's agreements: every rank's model and data files loaded, "
                  "a checkpoint resumed) before it aborts every rank with a message naming the peer and "
                  "the op (exit 1). Its own compute never counts. Once a step has run, runtime.watchdog_steps "
                  "may bound a step's waits further; a checkpoint's, a validation's and the set-up's keep this "
                  "limit (a rank scanning a larger corpus than the others for longer than it ends the run: raise "
                  "it).")
                  .range(0.1, 1e7));
  f.push_back(field<double>(
                  "runtime.watchdog_steps", [](Deck & d) -> auto& { return d.runtime.watchdog_steps; },
                  "Once a step has run, a step's waits (inputs, end-of-step collectives, the run's end) are "
                  "bounded also by this many times the slowest step so far, and by at least 30 s: a stopped "
                  "rank ends a run of one-second steps in about 30 s instead of runtime.watchdog_s. 0: "
                  "runtime.watchdog_s alone (for steps that may stall for minutes, e.g. data on a slow file "
                  "system).")
                  .range(0, 1e6));
  f.push_back(field<double>(
                  "runtime.peak_tflops", [](Deck & d) -> auto& { return d.runtime.peak_tflops; },
                  "Peak TFLOP/s of one device, the denominator of MFU (model FLOPs per second / (ranks x "
                  "peak)) in step lines and metrics.jsonl. 0: the backend's default: cuda 989.4 (bf16), "
                  "494.7 (fp32 with cuda.tf32) or 66.9 (fp32), the dense figures of an H100/H200 SXM; "
                  "emulated: cost.device_tflops when > 0 (the device its op times model; without it the op "
                  "times are the cost lists', not the model's, and MFU is not given); "
                  "cpu: a nominal 1 TFLOP/s (set your CPU's figure for a meaningful MFU).")
                  .range(0, 1e9));
}

namespace {

// Why a run name (a folder name and a label in traces, logs and Slurm job output) is not a plain one: control
// characters (a newline splits the log's lines) and bytes that are not UTF-8 (the terminal and HDF5 show them as
// replacement characters) are refused, and so is a name longer than a folder name may be with runs/'s suffixes.
std::string name_problem(const std::string& name) {
  constexpr std::size_t kMaxName = 200;  // NAME_MAX (255) less "-policy" and room for the lock and temporaries
  if (name.size() > kMaxName) {
    return "has " + std::to_string(name.size()) + " bytes; a run name has at most " + std::to_string(kMaxName);
  }
  if (const std::size_t at = control_byte_at(name); at != std::string::npos) {
    return "holds a control character (byte " + std::to_string(static_cast<unsigned char>(name[at])) +
           "); use printable ones";
  }
  if (const std::size_t at = utf8_error_at(name); at != std::string::npos) {
    return "is not UTF-8 text (at byte " + std::to_string(at) + "); use letters, digits, '-', '_' or '.'";
  }
  return {};
}

}  // namespace

void finalize_core(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
#ifndef CONDUCTOR_HAVE_CUDA
  if (deck.backend == "cuda") {
    problems.push_back(options.source_name +
                       ": backend = 'cuda' but this conductor was built without CUDA "
                       "(configure with -DCONDUCTOR_CUDA=ON where the CUDA toolkit, cuBLAS and NCCL are installed; "
                       "allowed here: cpu, emulated)");
  }
#endif
  if (deck.cuda.transport == "nccl" && deck.backend != "cuda") {
    problems.push_back(options.source_name + ": cuda.transport = 'nccl' needs backend: cuda (backend is '" +
                       deck.backend + "'; allowed with it: auto, mpi)");
  }
  if (deck.model.precision == "bf16" && deck.backend != "cuda") {
    problems.push_back(options.source_name + ": model.precision = 'bf16' needs backend: cuda (backend is '" +
                       deck.backend + "'; the cpu backend computes in fp32)");
  }
  // The name is a folder under runs/ (the default run.output) and a label in traces: one plain path component,
  // so `..`, `a/b` or an empty name never puts a run's files beside or above the other runs'.
  const std::string& name = deck.run.name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    problems.push_back(options.source_name + ": run.name = '" + printable(name) + "' must be one folder name (not " +
                       "empty, no '/', not '.' or '..'): the default run.output is runs/<run.name>; set run.output " +
                       "for another place");
  } else if (const std::string problem = name_problem(name); !problem.empty()) {
    problems.push_back(options.source_name + ": run.name = '" + printable(name) + "' " + problem);
  } else if (deck.run.output.empty()) {
    // Each command its own default folder: a simulation or a policy's training never meets a measured run's
    // results (train-policy after `make run` was refused in runs/<run.name>).
    const char* suffix = options.command == Command::Simulate      ? "-sim"
                         : options.command == Command::TrainPolicy ? "-policy"
                                                                   : "";
    deck.run.output = "runs/" + deck.run.name + suffix;
  }
  // The emulated backend has no weights: checkpoint.path wrote nothing and said nothing.
  if (deck.backend == "emulated" && (!deck.checkpoint.path.empty() || !deck.checkpoint.resume.empty())) {
    problems.push_back(options.source_name + ": " +
                       (deck.checkpoint.path.empty() ? "checkpoint.resume = '" + deck.checkpoint.resume
                                                     : "checkpoint.path = '" + deck.checkpoint.path) +
                       "' with backend = emulated, which has no weights to checkpoint (its ops only take time); use "
                       "backend: cpu or cuda, or leave checkpoint.path and checkpoint.resume empty");
  }
  if (options.command == Command::Run && options.world_size > 0 && deck.parallel.pipeline != options.world_size) {
    problems.push_back(options.source_name + ": parallel.pipeline = " + std::to_string(deck.parallel.pipeline) +
                       " but the job has " + std::to_string(options.world_size) +
                       " MPI ranks; `conductor run` needs one rank per pipeline stage (launch with mpirun -np " +
                       std::to_string(deck.parallel.pipeline) +
                       ", or set parallel.pipeline=" + std::to_string(options.world_size) + ")");
  }
}

}  // namespace conductor::config
