#!/usr/bin/python3
"""Fault suite: output protection and size guards. A run never writes over another run's results unless told to
(run.overwrite) or resuming; nothing in the folder changes before every input passed its checks; unwritable
folders and decks too large for the machine are refused at start with exit 2."""
import fcntl
import hashlib
import json
import os
import resource
import subprocess
import time
import unittest

from faultlib import BIN, EXIT_DEADLINE_S, MPIEXEC, FaultCase, Result, mpirun, run1


def digests(folder):
    """name -> sha256 of every file in folder (the run's results)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


class Outputs(FaultCase):
    def first_run(self, **kw):
        deck = self.deck(steps=1, **kw)
        r = mpirun(2, "run", deck)
        self.assertEqual(r.code, 0, r.text)
        before = digests(self.out)
        self.assertIn("trace.h5", before)
        return deck, before

    def test_existing_results_refused_and_kept(self):
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2")
        self.assertFault(r, 2, r"run\.output = '%s' already holds the results of another run \(trace\.h5, "
                         r"summary\.json, metrics\.jsonl, resolved\.yaml\).*run\.overwrite=true" % self.out)
        self.assertEqual(digests(self.out), before, "a refused run changed the old results")

    def test_failed_input_check_writes_nothing(self):
        # run.overwrite allows replacing, but only after every input passed: the missing checkpoint fails on
        # every rank, and the old trace and resolved.yaml must still be the first run's.
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2", "run.overwrite=true",
                   "checkpoint.resume=" + os.path.join(self.tmp.name, "no-such-checkpoint"))
        self.assertFault(r, 2, r"checkpoint\.resume")
        self.assertEqual(digests(self.out), before, "a run that failed its input checks changed the old results")

    def test_overwrite_replaces(self):
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2", "run.overwrite=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotEqual(digests(self.out)["resolved.yaml"], before["resolved.yaml"])

    def test_failed_overwrite_leaves_no_old_summary(self):
        # A replacing run that fails mid-way: its trace and metrics are the new run's, so the replaced run's
        # summary.json must not stay beside them (it did, read as theirs).
        deck, before = self.first_run()
        self.assertIn("summary.json", before)
        env = dict(os.environ, CONDUCTOR_INJECT_FAILURE="1:1")
        r = mpirun(2, "run", deck, "run.steps=3", "run.overwrite=true", env=env)
        self.assertNotEqual(r.code, 0, r.text)
        after = digests(self.out)
        self.assertNotIn("summary.json", after, "the replaced run's summary.json outlived the failed run")
        self.assertNotEqual(after["resolved.yaml"], before["resolved.yaml"])

    def test_overwrite_replaces_links_not_what_they_name(self):
        # Result files that are symbolic links (to another run's, or dangling): refused as results without
        # run.overwrite; with it the links are replaced, and what they name is left whole (before: trace.h5 and
        # metrics.jsonl were truncated through them, another run's trace replaced, a file made outside the folder).
        deck, before = self.first_run()
        other = os.path.join(self.tmp.name, "other")
        os.mkdir(other)
        for name in ("trace.h5", "metrics.jsonl"):
            os.symlink(os.path.join(self.out, name), os.path.join(other, name))
        r = mpirun(2, "run", deck, "run.output=" + other)
        self.assertFault(r, 2, r"run\.output = '%s' already holds the results of another run \(trace\.h5, "
                         r"metrics\.jsonl\)" % other)
        r = mpirun(2, "run", deck, "run.output=" + other, "run.overwrite=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertEqual(digests(self.out), before, "a run wrote through a link into another run's results")
        for name in ("trace.h5", "metrics.jsonl"):
            self.assertFalse(os.path.islink(os.path.join(other, name)), name)
        dangling = os.path.join(self.tmp.name, "dangling")
        os.mkdir(dangling)
        target = os.path.join(self.tmp.name, "outside.h5")
        os.symlink(target, os.path.join(dangling, "trace.h5"))
        r = run1("simulate", deck, "run.output=" + dangling)
        self.assertEqual(r.code, 0, r.text)
        self.assertFalse(os.path.exists(target), "simulate made a file outside its folder through a link")
        self.assertFalse(os.path.islink(os.path.join(dangling, "trace.h5")))

    def test_a_folder_being_written_is_refused(self):
        # Another process writes the folder now (it holds the lock, as a running command does): run and simulate
        # into it are refused, even with run.overwrite, and change nothing; once it is released they proceed.
        deck, before = self.first_run()
        with open(os.path.join(self.out, ".conductor.lock"), "a") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for r in (mpirun(2, "run", deck, "run.overwrite=true"),
                      run1("simulate", deck, "run.output=" + self.out, "run.overwrite=true")):
                self.assertFault(r, 2, r"run\.output = '%s' is being written by another conductor command now "
                                 r"\(process %d\); nothing was written" % (self.out, os.getpid()))
                self.assertEqual(digests(self.out), before)
        # A lock file left by a command that ended holds no lock.
        r = mpirun(2, "run", deck, "run.overwrite=true")
        self.assertEqual(r.code, 0, r.text)

    def test_a_checkpoint_root_being_written_is_refused(self):
        # Two jobs with one checkpoint.path (a sweep's deck): the second is refused while the first writes it, also
        # before the first has written a step (the command's check sees no checkpoints then), and writes nothing.
        ckpt = os.path.join(self.tmp.name, "ckpt")
        os.makedirs(ckpt)
        deck = self.deck(steps=1)
        with open(os.path.join(ckpt, ".conductor.lock"), "a") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            r = mpirun(2, "run", deck, "checkpoint.path=" + ckpt)
            self.assertFault(r, 2, r"checkpoint\.path = '%s' is being written by another conductor command now "
                             r"\(process %d\); nothing was written" % (ckpt, os.getpid()))
            self.assertEqual(sorted(os.listdir(ckpt)), [".conductor.lock"])
            self.assertFalse(os.path.exists(os.path.join(self.out, "trace.h5")))
        # Every rank probes checkpoint.path with a file of its own while rank 0 checks that it holds nothing: another
        # rank's probe, seen at that instant (under load), refused the run. Here one stays there throughout.
        open(os.path.join(ckpt, ".conductor-write-probe-999999"), "w").close()
        r = mpirun(2, "run", deck, "checkpoint.path=" + ckpt)
        self.assertEqual(r.code, 0, r.text)
        self.assertTrue(os.path.exists(os.path.join(ckpt, "latest")))

    def test_simulate_has_its_own_folder(self):
        deck = os.path.join(self.tmp.name, "sim.yaml")
        with open(deck, "w") as f:
            f.write("run: {name: tiny, steps: 2}\nparallel: {pipeline: 2, microbatches: 4}\n")
        r = run1("simulate", deck, cwd=self.tmp.name)
        self.assertEqual(r.code, 0, r.text)
        sim = os.path.join(self.tmp.name, "runs", "tiny-sim")
        self.assertTrue(os.path.isfile(os.path.join(sim, "summary.json")), r.text)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "runs", "tiny")))
        # The same deck again reproduces the same results (allowed); another deck there is refused.
        self.assertEqual(run1("simulate", deck, cwd=self.tmp.name).code, 0)
        before = digests(sim)
        r = run1("simulate", deck, "run.steps=3", cwd=self.tmp.name)
        self.assertFault(r, 2, r"run\.output = 'runs/tiny-sim' already holds the results of another run")
        self.assertEqual(digests(sim), before)

    # ---- resuming, and the other commands' folders: nothing of another run is replaced ----

    def checkpointed(self, folder, **kw):
        """A 1-step cpu run of the tiny deck (with kw) checkpointing into `folder` (its own run folder next to it);
        returns the checkpoint root."""
        root = os.path.join(self.tmp.name, folder)
        deck = self.deck(steps=1, extra="backend: cpu\n", name=folder + ".yaml", **kw)
        r = mpirun(2, "run", deck, "run.output=" + root + "-run", "checkpoint.path=" + root)
        self.assertEqual(r.code, 0, r.text)
        return root

    def test_resume_into_another_runs_folder_refused(self):
        # A checkpoint of another deck (8 microbatches) resumed into the first run's folder: the folder's
        # resolved.yaml is not this run's, so its trace is not continued with another run's steps.
        deck, before = self.first_run(extra="backend: cpu\n")
        ck = self.checkpointed("other", m=8)
        r = mpirun(2, "run", self.deck(steps=3, m=8, extra="backend: cpu\n", name="other.yaml"),
                   "run.output=" + self.out, "checkpoint.resume=" + ck)
        self.assertFault(r, 2, r"run\.output = '%s' holds the results of another run \(its resolved\.yaml differs: "
                         r"parallel\.microbatches = 8 here, 4 there\).*checkpoint\.resume continues a run in its own "
                         r"folder" % self.out)
        self.assertEqual(digests(self.out), before, "a refused resume changed the other run's results")

    def test_paths_too_long_refused_before_anything(self):
        # A checkpoint.path whose step folders would pass PATH_MAX failed only at the first checkpoint, after
        # training; a run.output as long created its first levels before failing. Both refused at start now.
        deep = self.tmp.name
        while len(deep) < 3900:
            deep = os.path.join(deep, "c" * 200)
        deep = os.path.join(deep, "d" * (4075 - len(deep) - 1))
        r = mpirun(2, "run", self.deck(steps=1), "checkpoint.path=" + deep)
        self.assertFault(r, 2, r"checkpoint\.path = '.*': the files written there would have paths of \d+ characters "
                         r"\(e\.g\. \.\.\./\.step-000001\.partial/manifest\.txt\), over the system's limit of 4095")
        self.assertFalse(os.path.exists(self.out), "a refused run created its folder")
        r = run1("simulate", self.deck(steps=1), "run.output=" + deep)
        self.assertFault(r, 2, r"run\.output = '.*': the files written there would have paths of \d+ characters")
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "c" * 200)), "folders were created")
        r = run1("simulate", self.deck(steps=1), "run.output=" + os.path.join(self.tmp.name, "n" * 300))
        self.assertFault(r, 2, r"the name 'n{40}\.\.\.' has 300 characters, over the system's limit of 255")

    def test_resume_may_log_less_often(self):
        # run.log_every and run.memory_limit_gb change nothing computed: a requeued job may set them otherwise and
        # still continue its own trace (it was refused as another run's).
        deck = self.deck(steps=1, extra="backend: cpu\n")
        ck = os.path.join(self.out, "checkpoints")
        r = mpirun(2, "run", deck, "checkpoint.path=" + ck)
        self.assertEqual(r.code, 0, r.text)
        r = mpirun(2, "run", deck, "run.steps=2", "checkpoint.path=" + ck, "checkpoint.resume=" + ck,
                   "run.log_every=5", "run.memory_limit_gb=64")
        self.assertEqual(r.code, 0, r.text)
        self.assertIn("continuing the trace", r.text)

    def test_resume_with_overwrite_replaces_another_runs_trace(self):
        # The same resume with run.overwrite=true, as the refusal above offers: the other run's trace and metrics
        # are replaced, not continued with this run's steps under the other run's attributes (one trace of two
        # configurations, read as one run).
        self.first_run(extra="backend: cpu\n")
        ck = self.checkpointed("other", m=8)
        r = mpirun(2, "run", self.deck(steps=3, m=8, extra="backend: cpu\n", name="other.yaml"),
                   "run.output=" + self.out, "checkpoint.resume=" + ck, "run.overwrite=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertIn("replacing the results in %s" % self.out, r.text)
        import h5py
        with h5py.File(os.path.join(self.out, "trace.h5"), "r") as t:
            self.assertEqual(int(t.attrs["microbatches"]), 8)
            self.assertEqual(sorted(set(int(s) for s in t["steps"]["step"])), [1, 2])
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            self.assertEqual(len(f.readlines()), 2, "the other run's metrics were kept")

    def test_resume_with_another_runs_checkpoint_path_refused(self):
        ours, theirs = self.checkpointed("ours"), self.checkpointed("theirs", m=8)
        before = {d: digests(os.path.join(theirs, d)) for d in os.listdir(theirs) if d.startswith("step-")}
        r = mpirun(2, "run", self.deck(steps=3, extra="backend: cpu\n", name="ours.yaml"),
                   "run.output=" + os.path.join(self.tmp.name, "resumed"), "checkpoint.resume=" + ours,
                   "checkpoint.path=" + theirs, "checkpoint.every=1")
        self.assertFault(r, 2, r"checkpoint\.path = '%s' already holds checkpoints of another run" % theirs)
        self.assertEqual(sorted(os.listdir(theirs)), [".conductor.lock", "latest"] + sorted(before))
        self.assertEqual({d: digests(os.path.join(theirs, d)) for d in before}, before)
        # Continuing the resumed checkpoints in their own root is what a requeued job does: allowed.
        r = mpirun(2, "run", self.deck(steps=2, extra="backend: cpu\n", name="ours.yaml"),
                   "run.output=" + ours + "-run", "checkpoint.resume=" + ours, "checkpoint.path=" + ours)
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"continuing the trace .*trace\.h5 at step 2")

    def test_resume_from_a_pruned_step_says_it_is_not_there(self):
        # checkpoint.path holds this run's own steps; the step named by checkpoint.resume was pruned: the message
        # is the missing folder, not "another run's checkpoints".
        ours = self.checkpointed("ours")
        missing = os.path.join(ours, "step-000099")
        r = mpirun(2, "run", self.deck(steps=3, extra="backend: cpu\n", name="ours.yaml"),
                   "run.output=" + ours + "-run", "checkpoint.resume=" + missing, "checkpoint.path=" + ours)
        self.assertEqual(r.code, 2, r.text)
        self.assertIn(missing, r.text)
        self.assertNotIn("another run", r.text)

    def test_a_checkpoint_root_is_not_a_run_folder(self):
        # Another run's checkpoint root (latest, step folders) given as run.output: simulate and a new run are
        # refused naming the checkpoints, and the root keeps exactly what it held.
        root = self.checkpointed("ck")
        before = {d: digests(os.path.join(root, d)) for d in os.listdir(root) if d.startswith("step-")}
        listing = sorted(os.listdir(root))
        for r in (run1("simulate", self.deck(steps=1), "run.output=" + root),
                  mpirun(2, "run", self.deck(steps=1), "run.output=" + root)):
            self.assertFault(r, 2, r"run\.output = '%s' already holds the results of another run \(checkpoints "
                             r"\((latest|step-\d+), \.\.\.\)\)" % root)
            self.assertEqual(sorted(os.listdir(root)), listing)
            self.assertEqual({d: digests(os.path.join(root, d)) for d in before}, before)

    def test_simulate_never_replaces_a_measured_run(self):
        # The very deck a measured run used: the simulator's trace would replace the measured one.
        deck, before = self.first_run()
        r = run1("simulate", deck, "run.steps=1")
        self.assertFault(r, 2, r"run\.output = '%s' already holds the results of another run \(trace\.h5, "
                         r"summary\.json, metrics\.jsonl, resolved\.yaml\)" % self.out)
        self.assertEqual(digests(self.out), before)

    def test_train_policy_keeps_another_policy(self):
        deck = self.deck(steps=1)
        args = ("train-policy", deck, "scheduler.kind=ppo", "ppo.iterations=1", "ppo.episodes=1", "ppo.minibatch=1")
        r = run1(*args)
        if "needs the global tier" in r.text:
            self.skipTest("this build has no global tier")
        self.assertEqual(r.code, 0, r.text)
        before = digests(self.out)
        self.assertIn("policy.pt", before)
        # The same deck again, or another: a trained policy is replaced only with run.overwrite (its folder holds
        # what a user keeps: curve.csv's wall times, summaries edited by hand, a policy.pt in use).
        for extra in ((), ("ppo.seed=99",)):
            r = run1(*args, *extra)
            self.assertFault(r, 2, r"run\.output = '%s' already holds a trained policy \(resolved\.yaml, "
                             r"policy\.pt, curve\.csv" % self.out)
            self.assertEqual(digests(self.out), before)
        # With it, the same deck gives the same policy (training is deterministic; curve.csv's seconds are not).
        self.assertEqual(run1(*args, "run.overwrite=true").code, 0)
        self.assertEqual(digests(self.out)["policy.pt"], before["policy.pt"])

    def test_unwritable_output_found_at_start(self):
        blocker = os.path.join(self.tmp.name, "a-file")
        open(blocker, "w").close()
        r = mpirun(2, "run", self.deck(steps=1), "run.output=" + blocker + "/out")
        self.assertFault(r, 2, r"run\.output = '.*a-file/out': '.*a-file' is not a folder")
        self.assertNotRegex(r.text, r"step +1/")
        r = run1("simulate", self.deck(steps=1), "run.output=" + blocker + "/out")
        self.assertFault(r, 2, r"run\.output = '.*a-file/out'")
        # A folder no file can be made in: named as such, not as one without free space for the trace.
        r = run1("simulate", self.deck(steps=1), "run.output=/proc/conductor-sim")
        self.assertFault(r, 2, r"run\.output = '/proc/conductor-sim': cannot write in '/proc'")

    def test_unwritable_checkpoint_path_found_before_training(self):
        # /proc refuses new files even to root, which passes every permission check.
        r = mpirun(2, "run", self.deck(steps=1), "checkpoint.path=/proc/conductor-checkpoints")
        self.assertFault(r, 2, r"checkpoint\.path = '/proc/conductor-checkpoints': cannot write in '/proc'")
        self.assertNotRegex(r.text, r"step +1/")
        self.assertFalse(os.path.exists(self.out), "a refused run created its folder")

    def test_simulate_size_guard_refuses_at_once(self):
        version = run1("--version")
        self.assertEqual(version.code, 0)
        startup = version.cpu_seconds  # loading the binary (LibTorch)
        r = run1("simulate", self.deck(), "parallel.pipeline=65536", "parallel.microbatches=1048576")
        self.assertFault(r, 2, r"the simulation needs about [0-9.e+]+ GB of memory \(\d+ ops per step: parallel\.pipeline 65536 x "
                         r"microbatches 1048576.*"
                         r"above the limit of [0-9.e+]+ GB")
        self.assertLess(r.cpu_seconds, 2 * startup + 1.0, "the size guard took too long")
        self.assertFalse(os.path.exists(self.out))

    def test_simulate_trace_space_guard(self):
        # A trace no disk holds (1e9 steps of 6000 ops: 24 TB at 4 bytes an event, a floor): refused at once naming
        # the numbers and the way out, nothing created. Before, it wrote 700 MB a minute for an ETA of days. (1 ns
        # ops keep the run inside the clock's check.)
        r = run1("simulate", self.deck(m=1000), "run.steps=1000000000", "cost.forward=1e-6",
                 "cost.backward_input=1e-6", "cost.backward_weight=1e-6")
        self.assertFault(r, 2, r"the trace would take at least [0-9.e+]+ GB \(run\.steps 1000000000 x 6000 op events "
                               r"per step x 4 bytes, compressed\), more than the [0-9.e+]+ GB free on the file system "
                               r"of '.*' \(run\.output = '%s'\); .*trace\.enabled=false" % self.out)
        self.assertFalse(os.path.exists(self.out))

    def test_simulate_trace_space_warning(self):
        # Above the floor but within what small noisy steps take: a warning before the run (which then fills the
        # small file system and stops naming the step); before, nothing said so.
        mnt = os.path.join(self.tmp.name, "small")
        os.mkdir(mnt)
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2000000", "tmpfs", mnt], capture_output=True)
        if mount.returncode != 0:
            self.skipTest("cannot mount a tmpfs here (%s)" % mount.stderr.decode().strip())
        self.addCleanup(subprocess.run, ["umount", mnt])
        self.out = os.path.join(mnt, "out")
        r = run1("simulate", self.deck(), "run.steps=10000")
        self.assertRegex(r.text, r"warning: the trace may take up to [0-9.e+]+ GB \(run\.steps 10000 x \d+ op events x "
                                 r"40 bytes, .*\), more than the [0-9.e+]+ GB free on the file system of '%s'" % mnt)
        self.assertFault(r, 1, r"error: step \d+: trace .*trace\.h5: .*No space left on device")

    def test_run_size_guard(self):
        r = mpirun(2, "run", self.deck(steps=1), "run.memory_limit_gb=0.001")
        self.assertFault(r, 2, r"the run needs about [0-9.e+]+ GB of memory on this node \(2 ranks; rank 0: .* "
                         r"parameters .*above the limit of 0\.001 GB set by run\.memory_limit_gb")
        self.assertFalse(os.path.exists(self.out))
        # validate (a run's rules) refuses what any node would: one rank alone above the deck's limit (it printed
        # the deck and exited 0, and the Slurm scripts' check let the job start).
        r = run1("validate", self.deck(steps=1), "run.memory_limit_gb=0.00001")
        self.assertFault(r, 2, r"rank [01] alone needs about [0-9.e+-]+ GB of memory .*above run\.memory_limit_gb = "
                         r"1e-05 GB for a node")
        self.assertEqual(run1("validate", self.deck(steps=1), "run.memory_limit_gb=100").code, 0)
        # Every step posts a receive (and a buffer) for each of its cross-rank inputs at once: a million microbatches
        # passed the guard (0.0013 GB) and then grew past 6 GB a rank before step 1 ended.
        r = run1("validate", self.deck(steps=1), "parallel.microbatches=1048576", "run.memory_limit_gb=4")
        self.assertFault(r, 2, r"rank [01] alone needs about [0-9.e+-]+ GB of memory .* of activations, [0-9.e+-]+ GB "
                               r"for the receives a step posts\), above run\.memory_limit_gb = 4 GB")

    @unittest.skipIf("ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ,
                     "a sanitizer reserves terabytes of address space: no ulimit -v lets the process start")
    def test_address_space_limit_bounds_the_guards(self):
        # ulimit -v (RLIMIT_AS): simulate passed its guard against the machine's memory and died of std::bad_alloc
        # after its first step; a run's rank failed mid set-up with no estimate. Both refused first, naming it.
        def cap():
            resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        deck = self.deck(steps=2)
        proc = subprocess.run([BIN, "simulate", deck, "parallel.microbatches=1000000"], capture_output=True, text=True,
                              timeout=60, preexec_fn=cap)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("above the limit of", proc.stderr)
        self.assertIn("set by this process's address-space limit (ulimit -v)", proc.stderr)
        self.assertFalse(os.path.exists(self.out))


class ClosedStreams(FaultCase):
    def test_closed_standard_streams_write_nothing_into_the_results(self):
        # With stdout and stderr closed (`>&- 2>&-`) the next files opened took their numbers: the progress lines
        # went into trace.h5 (unreadable, exit 0) and the summary into the folder's lock file.
        def close_streams():
            os.close(1)
            os.close(2)
        deck = self.deck(steps=400)
        proc = subprocess.run([BIN, "simulate", deck], stdin=subprocess.DEVNULL, timeout=60, preexec_fn=close_streams,
                              env=dict(os.environ, CONDUCTOR_PROGRESS_S="0"))
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(trace_steps(os.path.join(self.out, "trace.h5")), 400)
        self.assertEqual(os.path.getsize(os.path.join(self.out, ".conductor.lock")), 0)
        with open(os.path.join(self.out, "summary.json")) as f:
            self.assertEqual(json.load(f)["num_steps"], 400)


def trace_steps(path):
    """The number of step rows a trace holds, opened as the analysis tools open a file its writer left open (a
    killed run's: SWMR)."""
    import h5py
    with h5py.File(path, "r", swmr=True) as t:
        return len(t["steps"])


def limited(limit_bytes):
    """preexec_fn: a file-size limit (ulimit -f) for the process it starts."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))


class WritesRefused(FaultCase):
    """A write the system refuses (a file-size limit here; a full disk takes the same path with another errno):
    one message naming the file and the step, exit 1 on every rank, what was written before kept. Before, SIGXFSZ
    killed the process without a word, and with the signal ignored HDF5's error stack reached the user and its exit
    handler crashed (SIGSEGV)."""

    def test_simulate_trace(self):
        deck = self.deck(steps=400)
        start = time.monotonic()
        proc = subprocess.run([BIN, "simulate", deck], capture_output=True, text=True, timeout=60,
                              preexec_fn=limited(40960))
        r = Result(proc, time.monotonic() - start)
        # The step too, as a run names it (simulate named only the HDF5 call).
        self.assertFault(r, 1, r"error: step \d+: trace %s/trace\.h5: \w+ failed: cannot write: File too large \(the "
                         r"process's file-size limit: ulimit -f\)" % self.out)
        self.assertEqual(r.err.count("error:"), 1, r.err)
        self.assertTrue(os.path.exists(os.path.join(self.out, "resolved.yaml")))
        self.assertGreater(trace_steps(os.path.join(self.out, "trace.h5")), 0)  # the steps before it, readable

    def test_failed_rerun_keeps_the_earlier_results_whole(self):
        # A rerun over earlier results (run.overwrite) that fails writing: the folder held the new resolved.yaml
        # beside the old summary.json, the old trace deleted (summary.json was written after the commit), and a
        # failed trace.h5.new (a full disk) stayed beside them. Now every file of the earlier run stays as it was.
        deck = self.deck(steps=2)
        self.assertEqual(run1("simulate", deck).code, 0)
        before = digests(self.out)
        for limit, keys, failed in ((4096, ["trace.enabled=false"], "summary.json"), (40960, [], "trace.h5.new")):
            proc = subprocess.run([BIN, "simulate", deck, "run.steps=400", "run.overwrite=true", *keys],
                                  capture_output=True, text=True, timeout=60, preexec_fn=limited(limit))
            r = Result(proc, 0)
            self.assertFault(r, 1, r"%s.*File too large" % failed)
            self.assertEqual(digests(self.out), before, "a failed rerun changed the earlier results")

    def run_limited_rank0(self, limit, *args):
        # Rank 0 alone is limited (MPI's shared-memory transport writes files of its own: tcp instead).
        wrapper = 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then ulimit -f %d; fi; exec "$0" "$@"' % (limit // 1024)
        cmd = [MPIEXEC, "-n", "2", "--oversubscribe", "--mca", "btl", "self,tcp", "/bin/sh", "-c", wrapper, BIN,
               "run", *args]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXIT_DEADLINE_S + 60)
        return Result(proc, time.monotonic() - start)

    def test_run_trace_ends_every_rank(self):
        r = self.run_limited_rank0(60 * 1024, self.deck(steps=400))
        self.assertFault(r, 1, r"error: step \d+: trace %s/trace\.h5: \w+ failed: cannot write: File too large"
                         % self.out)
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            recorded = len(f.readlines())
        self.assertGreater(recorded, 0)  # the steps before it were recorded
        # ... and the trace holds them, readable: closing it after the failed write flushed a superblock whose end
        # of file lay past what the limit let through, and no step of it opened ("truncated file").
        self.assertEqual(trace_steps(os.path.join(self.out, "trace.h5")), recorded)

    def test_run_metrics(self):
        r = self.run_limited_rank0(8192, self.deck(steps=400), "trace.enabled=false")
        self.assertFault(r, 1, r"error: step \d+: %s/metrics\.jsonl: cannot write: File too large" % self.out)


if __name__ == "__main__":
    unittest.main()
