#pragma once
// Schedule generators. Each returns a Schedule that validate() accepts under the kind's memory limit.
//   gpipe               all F, then all BW (memory m)
//   1f1b                Megatron 1F1B: rank r runs p-r-1 warm-up F, then F/BW pairs, then BW (memory p)
//   1f1b-interleaved    Megatron's interleaved 1F1B, v >= 2 chunks in loop placement; microbatches run in groups
//                       of p (m must be a multiple of p), warm-up (p-r-1)*2 + (v-1)*p chunk forwards
//   zb-h1               Zero Bubble ZB-H1: p-r warm-up F, then B [W] F with W deferred by r (memory p);
//                       rank-span bubble (p-1)(F+B-W)
//   zb-h2               Zero Bubble ZB-H2: 2(p-r)-1 warm-up F, W deferred by 2r (memory 2p);
//                       rank-span bubble (p-1)(F+B+2c-2W) when positive
//   zb-1p, zb-2p        Zero Bubble automatic schedules: the paper's greedy timeline fill (simulate each stage,
//                       insert W where F or B would wait, within the memory limit) over its heuristic variants,
//                       plus readiness-realized variants; the candidate with the shortest noise-free makespan
//                       under the given cost model wins (memory limit p resp. 2p unless given)
//   zb-v                ZB-V as published (Zero Bubble, arXiv 2401.10241 section 6): the authors' greedy search over
//                       two chunks per rank in V placement (zbv.cpp), smallest largest per-rank bubble of its
//                       variants, within the limit (default p M_F, 1F1B's)
//   zb-v-greedy         conductor's earlier V: the same placement, a microbatch-major list realized by the
//                       readiness arbiter (B first, then F, W filling idle time) within the limit (default p)
//   dualpipev           DeepSeek's DualPipe in a V, as torch.distributed.pipelining's ScheduleDualPipeV
//                       (dualpipev.cpp): overlapped F-and-full-B pairs written as two consecutive actions;
//                       needs m >= 2p; peak p + 1/2 M_F (a pair's F runs before its B frees)
#include <string>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

const std::vector<std::string>& generator_kinds();

// The kind's default activation-memory limit (M_F per rank) when schedule.memory_limit is 0.
using plan::default_memory_limit;

// What zb-1p / zb-2p minimize among their candidates. Makespan: the noise-free step makespan (synchronous
// steps: the next step waits for the last rank). StageSpan: the longest rank span, first op's start to last
// op's end on one rank, then the makespan: the Zero Bubble paper's measure, and the period of overlapping steps
// (schedule.post_validation), where a rank starts its next step as soon as its own part ends.
enum class ZbObjective { Makespan, StageSpan };

// Builds `kind` for p ranks, m microbatches, v chunks; memory_limit <= 0 = the kind's default. Throws
// InputError for impossible requests (interleaved with m % p != 0, zb-v with v != 2, ...).
Schedule generate(const std::string& kind, int p, int m, int v, const CostModel& cost, double memory_limit = 0,
                  ZbObjective objective = ZbObjective::Makespan);

// The plan's schedule: schedule.kind (a generator, or file:PATH loaded and validated against the plan's p, m, v
// and memory limit), planned with the plan's costs; zb-1p / zb-2p minimize the longest rank span when
// schedule.post_validation overlaps steps, else the makespan.
Schedule make_schedule(const plan::Plan& plan);

// The memory limit of each rank (M_F) that make_schedule() used and the simulator and runtime enforce: the
// plan's, or for a file: schedule given without a limit, the schedule's own peak (the one default that depends
// on the schedule, hence here and not in config::resolve).
std::vector<double> rank_memory_limits(const plan::Plan& plan, const Schedule& schedule);
// The largest of them (the figure reported in summaries).
double memory_limit_for(const plan::Plan& plan, const Schedule& schedule);

// Individual generators.
Schedule gpipe(int p, int m);
Schedule one_f_one_b(int p, int m);
Schedule interleaved_1f1b(int p, int m, int v);
Schedule zb_h1(int p, int m);
Schedule zb_h2(int p, int m);
Schedule zb_auto(int p, int m, const CostModel& cost, double memory_limit, const std::string& name,
                 ZbObjective objective = ZbObjective::Makespan);
Schedule zb_v(int p, int m, const CostModel& cost, double memory_limit);  // zbv.cpp
Schedule zb_v_greedy(int p, int m, const CostModel& cost, double memory_limit);
Schedule dualpipe_v(int p, int m, double memory_limit, double memory_after_b);  // dualpipev.cpp

// Noise-free strict makespan of a schedule under a cost model (ms).
double planned_makespan(const Schedule& s, const CostModel& cost);

}  // namespace conductor::sched
