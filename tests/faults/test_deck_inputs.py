#!/usr/bin/python3
"""Fault suite: decks a user gets wrong that already fail cleanly (kept green as the suite grows)."""
import os
import unittest

from faultlib import FaultCase, mpirun, run1


class DeckInputs(FaultCase):
    def test_missing_deck_file(self):
        self.assertFault(run1("validate", self.tmp.name + "/nope.yaml"), 2, r"nope\.yaml")

    def test_wrong_rank_count(self):
        self.assertFault(mpirun(3, "run", self.deck(p=2)), 2, r"parallel\.pipeline")

    def test_log_normal_sigma_bounded(self):
        # Inside noise.level's range (0..100) but not a usable sigma: at 10 every op took e^-50 of its time and
        # the step's figures were all zero, with exit 0.
        for kind in ("lognormal", "sample", "heterogeneous"):
            r = run1("simulate", self.deck(steps=1), "noise.kind=" + kind, "noise.level=10")
            self.assertFault(r, 2, r"noise\.level = 10 with noise\.kind %s is a log-normal sigma; allowed 0 \.\. 3" % kind)
            self.assertFalse(os.path.exists(self.out))
        self.assertEqual(run1("simulate", self.deck(steps=1), "noise.kind=lognormal", "noise.level=3").code, 0)

    def test_op_times_a_clock_cannot_hold(self):
        # Each value inside its key's range, together past any clock: named, not an internal error after writing.
        cases = [(["cost.device_tflops=1e-300"], r"cost\.device_tflops = 1e-300"),
                 (["cost.bandwidth_gbps=1e-300"], r"cost\.bandwidth_gbps = 1e-300"),
                 (["cost.forward=[1e9, 1e9]", "parallel.microbatches=100000"], r"parallel\.microbatches = 100000")]
        for keys, named in cases:
            r = run1("simulate", self.deck(steps=1), *keys)
            self.assertFault(r, 2, r"one step would take .* ms a run may take")
            self.assertRegex(r.text, named)
            self.assertFalse(os.path.exists(self.out))
        # The whole run's clock counts: run.steps and a straggler's factor (3 steps of a 1000x straggler on 8e9 ms
        # steps ended in an internal "step 2 has no compute event", exit 1; 2 steps in negative figures, exit 0).
        r = run1("simulate", self.deck(steps=3), "cost.backward_weight=1e9", "noise.kind=straggler",
                 "noise.straggler_rank=0", "noise.straggler_factor=1000")
        self.assertFault(r, 2, r"up to noise\.straggler_factor = 1000 times that; run\.steps = 3 of them exceed")
        self.assertFalse(os.path.exists(self.out))

    def test_op_times_below_the_clock(self):
        # Below the trace's 1 ns an op rounded to nothing: per step a makespan of 0 beside a run throughput of
        # 6e13, exit 0. All-zero costs gave throughput 0. Both refused naming the keys; 1 ns itself passes.
        cases = [(["cost.device_tflops=1e9"], r"cost\.device_tflops = 1000000000 \(op times derived from the model\) "
                                             r"give an op time of .* ms on stage 0, below the trace clock's 1 ns"),
                 (["cost.forward=1e-9"], r"cost\.forward, cost\.backward_input and cost\.backward_weight give an op "
                                         r"time of 1e-0?9 ms on stage 0, below the trace clock's 1 ns"),
                 (["cost.forward=0", "cost.backward_input=0", "cost.backward_weight=0"],
                  r"give every op a time of 0 ms")]
        for keys, says in cases:
            r = run1("simulate", self.deck(steps=1), *keys)
            self.assertFault(r, 2, says)
            self.assertFalse(os.path.exists(self.out))
        r = run1("simulate", self.deck(steps=1), "cost.forward=1e-6", "cost.backward_weight=0", "--json")
        self.assertEqual(r.code, 0, r.text)

    def test_noise_draws_past_the_clock(self):
        # Random noise past the deck check's margin: heterogeneous sigma 3 (rank speeds drawn once) on 1e9 ms ops,
        # 33 microbatches, 10 steps (9.9e11 ms noise-free, inside the 1e12 a run may take). The tenth step passes
        # the clock's 9.2e12 ms: stopped, naming the keys. Before, the times wrapped and it printed a makespan
        # below its own lower bound, exit 0.
        r = run1("simulate", self.deck(steps=10, m=33), "noise.kind=heterogeneous", "noise.level=3", "noise.seed=1",
                 "cost.forward=1e9", "cost.backward_input=1e9", "cost.backward_weight=1e9", "--json")
        self.assertFault(r, 2, r"the simulated clock reached .* ms, past the 9200000000000 ms a trace holds .*"
                               r"noise\.kind, noise\.level.*; nothing of this run is kept in ")
        self.assertNotIn("makespan_ms", r.text)
        # What the refused run wrote is gone (a resolved.yaml and a partial trace.h5 made the folder another run's,
        # so the rerun with the mended deck was refused), and the folder it made.
        self.assertFalse(os.path.exists(self.out))
        r = run1("simulate", self.deck(steps=10, m=33), "noise.kind=heterogeneous", "noise.level=0.1",
                 "noise.seed=1", "cost.forward=1e9", "cost.backward_input=1e9", "cost.backward_weight=1e9", "--json")
        self.assertEqual(r.code, 0, r.text)

    def test_memory_limit_below_the_schedule(self):
        # validate accepted it and simulate refused it without naming the key. Now both refuse, naming
        # schedule.memory_limit and the schedule's own limit; a limit the list fits passes.
        for command in ("validate", "simulate"):
            r = run1(command, self.deck(steps=1), "schedule.kind=1f1b", "schedule.memory_limit=1")
            self.assertFault(r, 2, r"1f1b with memory limit 1 M_F: .*does not fit in memory: .*over the limit of 1 M_F "
                                   r"\(the limit is "
                                   r"schedule\.memory_limit = 1; 0 takes the schedule's own limit, here 2 M_F, its "
                                   r"list's peak 2 M_F\)")
            self.assertFalse(os.path.exists(self.out))
        # The own limit is the kind's (2p for zb-h2), which its list need not reach: the message gave the peak as
        # the limit.
        r = run1("validate", self.deck(steps=1, p=4, m=8), "schedule.kind=zb-h2", "cost.memory_after_b=0.5",
                 "schedule.memory_limit=6.5")
        self.assertFault(r, 2, r"over the limit of 6\.5 M_F \(the limit is schedule\.memory_limit = 6\.5; 0 takes the "
                               r"schedule's own limit, here 8 M_F, its list's peak 7 M_F\)")
        self.assertEqual(run1("validate", self.deck(steps=1), "schedule.kind=1f1b", "schedule.memory_limit=2").code, 0)

    def test_zb_v_search_failures_say_why(self):
        # The published ZB-V search drops every variant when a slower first stage breaks its warm-up: said so,
        # not "within the memory limit of 2.000000 M_F (it needs about p M_F)", which memory did not cause.
        r = run1("validate", self.deck(steps=1, m=4), "schedule.kind=zb-v", "parallel.virtual=2",
                 "model.n_layers=4", "cost.forward=[1.01, 1]")
        self.assertFault(r, 2, r"zb-v: the published V search finds no schedule for p = 2, m = 4 \(it places an op "
                               r"before its input's producer: .*uneven.*\); zb-v-greedy fits any costs and limit")
        self.assertNotIn("memory limit", r.text)
        r = run1("validate", self.deck(steps=1, m=4), "schedule.kind=zb-v", "parallel.virtual=2",
                 "model.n_layers=4", "schedule.memory_limit=1")
        self.assertFault(r, 2, r"the memory limit of 1 M_F per rank is below what it needs")
        # Even costs, a limit under p: the search's variants also placed an op before its producer, and the
        # message blamed uneven costs alone. The search without a limit tells.
        r = run1("validate", self.deck(steps=1, p=4, m=8), "schedule.kind=zb-v", "parallel.virtual=2",
                 "model.n_layers=8", "schedule.memory_limit=3")
        self.assertFault(r, 2, r"\(the memory limit of 3 M_F per rank is below what it needs \(about p M_F\)\)")
        self.assertNotIn("uneven", r.text)

    def test_output_file_names_taken_by_folders(self):
        # trace.h5 as a folder gave HDF5's raw multi-line dump (exit 1); summary.json as a folder failed after the
        # whole run had trained. Now refused before anything runs, naming the folder.
        for name in ("trace.h5", "summary.json"):
            os.makedirs(os.path.join(self.out, name), exist_ok=True)
            for r in (run1("simulate", self.deck(steps=1), "run.overwrite=true"),
                      mpirun(2, "run", self.deck(steps=1), "run.overwrite=true")):
                self.assertFault(r, 2, r"run\.output = '%s' holds a folder named '%s', where the run writes that "
                                       r"file" % (self.out, name.replace(".", r"\.")))
            os.rmdir(os.path.join(self.out, name))

    def test_noise_kinds_once_and_none_alone(self):
        # Accepted before: a repeated kind applied twice, none beside another kind said two contrary things.
        r = run1("validate", self.deck(), "noise.kind=[gaussian, gaussian]")
        self.assertFault(r, 2, r"noise\.kind lists gaussian twice; name each kind once")
        r = run1("validate", self.deck(), "noise.kind=[none, lognormal]")
        self.assertFault(r, 2, r"noise\.kind lists none beside other kinds; none stands alone")
        self.assertEqual(run1("validate", self.deck(), "noise.kind=[gaussian, straggler]").code, 0)

    def test_more_mlp_slices_than_columns(self):
        # d_model 32 x mlp_ratio 4 = 128 MLP columns: 129 slices left a group empty, and the cpu backend's
        # gradients were wrong (the MLP's output bias rides with the group that starts at column 0).
        keys = ("migration.enabled=true", "migration.units=[mlp]")
        r = run1("validate", self.deck(), *keys, "migration.slices=129")
        self.assertFault(r, 2, r"migration\.slices = 129 exceeds the MLP's 128 columns .*allowed 1 \.\. 128")
        self.assertEqual(run1("validate", self.deck(), *keys, "migration.slices=128").code, 0)


if __name__ == "__main__":
    unittest.main()
