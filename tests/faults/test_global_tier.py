#!/usr/bin/python3
"""Fault suite, the global tier (the PPO module and `conductor train-policy`): a truncated module is refused by
name instead of a SIGBUS; a stopped or failed train-policy leaves a previous run's folder as it was (byte for
byte, no temporaries) with one message; a deck too large for the machine is refused before anything is written;
a policy file whose archive LibTorch cannot read gets our words, not c10's. Skipped in a build without the
module (-DCONDUCTOR_POLICY=OFF)."""
import fcntl
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time
import unittest
import zlib

from faultlib import BIN, EXIT_DEADLINE_S, RAW_DUMP, Background, FaultCase, mpirun, run1

MODULE = os.path.join(os.path.dirname(os.path.abspath(BIN)), "libconductor_global_tier.so")
SOURCE = os.environ.get("CONDUCTOR_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXIT_STOPPED = 3  # a clean stop by SIGTERM/SIGINT (README, exit codes)
TRAIN_FILES = ["resolved.yaml", "curve.csv", "summary.csv", "summary.txt", "policy.pt"]

# inputs/policies/default.yaml cut down: a few seconds of training at most.
PPO_DECK = """\
run: {name: tp, output: %(out)s, seed: 1234}
parallel: {pipeline: 4, microbatches: 8}
schedule: {kind: zb-2p, execution: readiness, hint: bfw}
noise: {kind: gaussian, level: 0.1, seed: 10}
scheduler: {kind: ppo}
ppo: {iterations: 2, episodes: 2, eval_steps: 2, seed: 7, heuristic: bfw}
"""


@unittest.skipUnless(os.path.exists(MODULE), "no global tier in this build")
class GlobalTier(FaultCase):
    def ppo_deck(self):
        path = os.path.join(self.tmp.name, "ppo.yaml")
        with open(path, "w") as f:
            f.write(PPO_DECK % {"out": self.out})
        return path

    def previous_run(self, deck):
        """A finished train-policy in self.out; returns its files' bytes."""
        res = run1("train-policy", deck, timeout=120)
        self.assertEqual(res.code, 0, res.text)
        return self.snapshot()

    def stamped(self, name, body):
        """A policy file of the shipped one's header over `body`, its body_bytes and body_crc32 made to match."""
        with open(os.path.join(SOURCE, "inputs", "policies", "default.pt"), "rb") as f:
            header = f.readline().decode()
        header = re.sub(r"body_bytes=\d+", "body_bytes=%d" % len(body), header)
        header = re.sub(r"body_crc32=0x[0-9a-f]+", "body_crc32=0x%08x" % zlib.crc32(body), header)
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(header.encode() + body)
        return path

    @staticmethod
    def shipped_archive():
        import io
        import zipfile
        with open(os.path.join(SOURCE, "inputs", "policies", "default.pt"), "rb") as f:
            f.readline()
            return zipfile.ZipFile(io.BytesIO(f.read()))

    @staticmethod
    def zipped(entries):
        """A stored (uncompressed) zip of (name, bytes) pairs, in order."""
        import io
        import zipfile
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            for name, data in entries:
                z.writestr(name, data)
        return buf.getvalue()

    def snapshot(self):
        files = {}
        for name in sorted(os.listdir(self.out)):
            with open(os.path.join(self.out, name), "rb") as f:
                files[name] = f.read()
        return files

    def assertUnchanged(self, before):
        after = self.snapshot()
        self.assertEqual(sorted(after), sorted(before), "files added or removed in run.output")
        for name in before:
            self.assertEqual(after[name], before[name], name + " was replaced")
        self.assertFalse([n for n in after if n.endswith(".tmp")], "temporaries left behind")

    # ---- the module itself --------------------------------------------------------------------------------

    def test_training_gives_the_same_bytes_at_any_thread_count(self):
        # LibTorch's matmuls run in OpenBLAS, which sized its threads from OMP_NUM_THREADS: one thread and two
        # summed differently, and the same deck trained to other policy bytes on a node of another core count.
        policies = []
        for threads in ("1", "2"):
            out = os.path.join(self.tmp.name, "threads" + threads)
            env = dict(os.environ, OMP_NUM_THREADS=threads)
            env.pop("OPENBLAS_NUM_THREADS", None)
            res = run1("train-policy", os.path.join(SOURCE, "inputs", "policies", "default.yaml"), "run.output=" + out,
                       "ppo.iterations=20", "ppo.episodes=8", env=env, timeout=120)
            self.assertEqual(res.code, 0, res.text)
            with open(os.path.join(out, "policy.pt"), "rb") as f:
                policies.append(f.read())
        self.assertEqual(policies[0], policies[1])

    def test_truncated_module_is_refused_by_name(self):
        """A module cut short (a copy interrupted, a full disk) was mapped past its end: SIGBUS (exit 135), no
        message. Now its ELF header is checked first: the loader's one 'tried:' message, exit 2 since the module is
        the user's CONDUCTOR_GLOBAL_TIER (a bad input, as a path in the deck; it exited 1), as is one not there."""
        with open(MODULE, "rb") as f:
            data = f.read()
        deck = self.ppo_deck()
        for size in (100000, 40):
            trunc = os.path.join(self.tmp.name, "trunc%d.so" % size)
            with open(trunc, "wb") as f:
                f.write(data[:size])
            env = dict(os.environ, CONDUCTOR_GLOBAL_TIER=trunc)
            res = run1("simulate", deck, env=env)
            self.assertGreaterEqual(res.code, 0, "killed by signal %d:\n%s" % (-res.code, res.text))
            self.assertFault(res, 2, re.escape(trunc) + r": truncated or not a shared library \(size %d bytes, "
                             r"its ELF header needs \d+\)" % size)
            self.assertIn("none could be loaded; tried:", res.text)
            self.assertFalse(os.path.exists(os.path.join(self.out, "summary.json")))
        missing = os.path.join(self.tmp.name, "no-such.so")
        res = run1("validate", deck, env=dict(os.environ, CONDUCTOR_GLOBAL_TIER=missing))
        self.assertFault(res, 2, re.escape(missing) + r": not there")

    def test_module_and_policy_paths_are_looked_up_as_named(self):
        """A bare CONDUCTOR_GLOBAL_TIER name is the file in the working folder (dlopen searched the library path for
        it: 'cannot open shared object file' beside the file, or the system's library of that name loaded); a path
        too long for the file system, for the module or the policy, is one message and exit 2 (a raw 'filesystem
        error', exit 1); a library that is not conductor's is said to be none."""
        deck = self.ppo_deck()
        folder = os.path.join(self.tmp.name, "here")
        os.mkdir(folder)
        shutil.copy(MODULE, os.path.join(folder, "mymodule.so"))
        res = run1("validate", deck, env=dict(os.environ, CONDUCTOR_GLOBAL_TIER="mymodule.so"), cwd=folder)
        self.assertEqual(res.code, 0, res.text)
        long_name = os.path.join(self.tmp.name, "x" * 300)
        res = run1("validate", deck, env=dict(os.environ, CONDUCTOR_GLOBAL_TIER=long_name + ".so"))
        self.assertFault(res, 2, re.escape(long_name) + r"\.so: cannot be looked up \(File name too long\)")
        res = run1("validate", deck, "scheduler.policy=" + long_name + ".pt")
        self.assertFault(res, 2, r"policy file '" + re.escape(long_name) + r"\.pt' cannot be opened \(File name too "
                         r"long\)")
        libz = "/usr/lib/x86_64-linux-gnu/libz.so.1"
        if os.path.exists(libz):
            res = run1("validate", deck, env=dict(os.environ, CONDUCTOR_GLOBAL_TIER=libz))
            self.assertFault(res, 2, re.escape(libz) + r": not conductor's global tier module \(no "
                             r"conductor_global_tier_v1 entry table")

    # ---- train-policy: a previous run's folder is never a mix ---------------------------------------------

    def test_sigterm_leaves_the_previous_training_as_it_was(self):
        """SIGTERM midway through a train-policy with run.overwrite=true exited 143 with no message, having
        replaced resolved.yaml and curve.csv already. Now: exit 3, one line naming the iteration, every previous
        file byte-identical and no *.tmp left."""
        deck = self.ppo_deck()
        before = self.previous_run(deck)
        run = Background([BIN, "train-policy", deck, "run.overwrite=true", "ppo.iterations=1000000"])
        self.addCleanup(run.kill)
        deadline = time.monotonic() + 60
        while not any(l.startswith("iter ") for l in run.out + run.err):
            self.assertIsNone(run.proc.poll(), "train-policy ended early:\n" + "".join(run.out + run.err))
            self.assertLess(time.monotonic(), deadline, "no iteration within 60 s")
            time.sleep(0.05)
        self.assertTrue(any(n.endswith(".tmp") for n in os.listdir(self.out)), "no temporaries while training")
        since = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        try:
            run.proc.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pass
        res = run.result(since)
        self.assertFault(res, EXIT_STOPPED, r"train-policy: interrupted by SIGTERM at iteration \d+ of 1000000 "
                         r"\(\d+ done\); nothing in %s was replaced" % re.escape(self.out))
        self.assertEqual(len(re.findall("interrupted", res.text)), 1, res.text)
        self.assertUnchanged(before)

    def test_write_error_names_the_file_and_why(self):
        """A full disk gave 'cannot write policy file .../policy.pt.tmp' with no reason, after resolved.yaml was
        replaced, and left policy.pt.tmp. A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with
        EFBIG, as on a full disk, even as root) provokes it: exit 1, the file and the reason named, the previous
        run's files byte-identical and no temporaries left."""
        deck = self.ppo_deck()
        before = self.previous_run(deck)
        limit = 8192  # above resolved.yaml and curve.csv, below the policy file

        def limited():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        start = time.monotonic()
        proc = subprocess.run([BIN, "train-policy", deck, "run.overwrite=true"], capture_output=True, text=True,
                              timeout=120, preexec_fn=limited)
        res = type("R", (), {"code": proc.returncode, "text": proc.stdout + proc.stderr,
                             "seconds": time.monotonic() - start})
        self.assertFault(res, 1, r"cannot write (policy file )?'%s/[a-z.]+\.tmp': File too large" %
                         re.escape(self.out))
        self.assertUnchanged(before)

    def test_a_folder_being_written_is_refused(self):
        """Two train-policy runs into one folder at once both exited 0, leaving one's policy.pt beside the
        other's resolved.yaml. One writer per folder: while another process holds its lock, train-policy is
        refused and changes nothing."""
        deck = self.ppo_deck()
        before = self.previous_run(deck)
        with open(os.path.join(self.out, ".conductor.lock"), "a") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            res = run1("train-policy", deck, "run.overwrite=true", "ppo.seed=8", timeout=120)
            self.assertFault(res, 2, r"run\.output = '%s' is being written by another conductor command now "
                             r"\(process %d\)" % (re.escape(self.out), os.getpid()))
        self.assertUnchanged(before)

    def test_a_trained_policy_is_replaced_only_with_overwrite(self):
        """train-policy again into a folder holding a trained policy of the very same deck replaced every file
        (policy.pt perhaps in use as scheduler.policy, curve.csv's wall times, a summary.txt the user edited),
        exit 0. Now it is refused (exit 2), naming the folder and the files, and changes nothing; an empty folder
        is fine, and run.overwrite=true replaces them."""
        deck = self.ppo_deck()
        os.makedirs(self.out)  # an empty folder: no previous results
        self.previous_run(deck)
        with open(os.path.join(self.out, "summary.txt"), "a") as f:
            f.write("notes: the policy of the paper's figure 3\n")
        before = self.snapshot()
        for extra in ((), ("ppo.seed=8",)):
            res = run1("train-policy", deck, *extra, timeout=120)
            self.assertFault(res, 2, r"run\.output = '%s' already holds a trained policy \(resolved\.yaml, "
                             r"policy\.pt, curve\.csv, summary\.csv, summary\.txt\), which train-policy would "
                             r"replace; nothing was written\..*set run\.overwrite=true to replace them"
                             % re.escape(self.out))
            self.assertNotIn("iter ", res.text)  # refused before training
            self.assertUnchanged(before)
        res = run1("train-policy", deck, "run.overwrite=true", timeout=120)
        self.assertEqual(res.code, 0, res.text)
        with open(os.path.join(self.out, "summary.txt")) as f:
            self.assertNotIn("notes:", f.read())

    # ---- the policy a run used, in summary.json ---------------------------------------------------------

    def test_summary_names_the_policy(self):
        """summary.json of a ppo run did not say which policy planned its orders. Now `policy` holds the file's
        absolute path, size and CRC-32 and its training deck's CRC-32 (the deck in resolved.yaml beside it), for
        `simulate` and `run` alike; absent for scheduler.kind static."""
        deck = self.ppo_deck()
        self.previous_run(deck)
        policy = os.path.join(self.out, "policy.pt")
        with open(policy, "rb") as f:
            data = f.read()
        # The training deck: resolved.yaml without its comment lines, where the files went at the defaults.
        with open(os.path.join(self.out, "resolved.yaml")) as f:
            trained_on = "".join(l for l in f if not l.startswith("#"))
        self.assertIn("  output: %s\n  overwrite: false\n" % self.out, trained_on)
        trained_on = trained_on.replace("  output: %s\n" % self.out, '  output: ""\n')
        want = {"path": policy, "bytes": len(data), "crc32": "0x%08x" % zlib.crc32(data),
                "deck_crc32": "0x%08x" % zlib.crc32(trained_on.encode())}

        def summary(folder):
            with open(os.path.join(folder, "summary.json")) as f:
                return json.load(f)

        sim = os.path.join(self.tmp.name, "sim")
        res = run1("simulate", deck, "run.output=" + sim, "run.steps=3", "scheduler.policy=" + policy)
        self.assertEqual(res.code, 0, res.text)
        self.assertEqual(summary(sim)["policy"], want)
        # As given relative to the working folder: recorded absolute.
        rel = os.path.join(self.tmp.name, "sim-rel")
        res = run1("simulate", deck, "run.output=" + rel, "run.steps=1", "scheduler.policy=out/policy.pt",
                   cwd=self.tmp.name)
        self.assertEqual(res.code, 0, res.text)
        self.assertEqual(summary(rel)["policy"]["path"], policy)
        # The shipped policy, found by default: written before deck_crc32, so its training deck is null.
        shipped = os.path.join(os.path.realpath(SOURCE), "inputs", "policies", "default.pt")
        res = run1("simulate", deck, "run.output=" + sim + "-shipped", "run.steps=1", cwd=SOURCE)
        self.assertEqual(res.code, 0, res.text)
        with open(shipped, "rb") as f:
            shipped_bytes = f.read()
        got = summary(sim + "-shipped")["policy"]
        self.assertEqual((got["path"], got["crc32"]), (shipped, "0x%08x" % zlib.crc32(shipped_bytes)))
        if b"deck_crc32=" not in shipped_bytes.split(b"\n", 1)[0]:
            self.assertIsNone(got["deck_crc32"])
        res = run1("simulate", deck, "run.output=" + sim + "-static", "run.steps=1", "scheduler.kind=static")
        self.assertEqual(res.code, 0, res.text)
        self.assertNotIn("policy", summary(sim + "-static"))
        # conductor run (rank 0 writes summary.json) records the same.
        measured = os.path.join(self.tmp.name, "run")
        res = mpirun(2, "run", deck, "backend=emulated", "parallel.pipeline=2", "parallel.microbatches=4",
                     "run.steps=3", "run.output=" + measured, "scheduler.policy=" + policy)
        self.assertEqual(res.code, 0, res.text)
        got = summary(measured)
        self.assertEqual(got["scheduler"]["kind"], "ppo")
        self.assertEqual(got["policy"], want)

    # ---- train-policy: the size guard ----------------------------------------------------------------------

    def test_too_large_a_deck_is_refused_before_anything_is_written(self):
        """train-policy had no size guard: std::bad_alloc after resolved.yaml was written. Now simulate's estimate
        refuses it first (exit 2, nothing created), and so does an iteration's experience above the limit."""
        deck = self.ppo_deck()
        res = run1("train-policy", deck, "parallel.pipeline=4096", "parallel.microbatches=1000000",
                   "ppo.iterations=1", "ppo.episodes=1", "ppo.eval_steps=1", "run.memory_limit_gb=8")
        self.assertFault(res, 2, r"the simulation needs about [\d.e+]+ GB of memory .*above the limit of 8 GB set "
                         r"by run.memory_limit_gb")
        self.assertNotIn("bad_alloc", res.text)
        self.assertFalse(os.path.exists(self.out))
        res = run1("train-policy", deck, "parallel.pipeline=64", "parallel.microbatches=10000", "ppo.episodes=16",
                   "run.memory_limit_gb=1")
        self.assertFault(res, 2, r"train-policy needs about [\d.]+ GB of memory for an iteration's experience .*"
                         r"ppo.episodes 16.*above the limit of 1 GB set by run.memory_limit_gb")
        self.assertFalse(os.path.exists(self.out))

    # ---- policy files LibTorch cannot read -----------------------------------------------------------------

    def test_archive_without_version_record_is_named_in_our_words(self):
        """A policy file with a valid header and CRC-32 over a zip that is not a LibTorch archive (no 'version'
        record) printed c10's 'Expected hasRecord(...) ... (Could this error message be improved? ...)'."""
        policy = self.stamped("noversion.pt", self.zipped([("archive/data.pkl", b"not a pickle")]))
        res = run1("simulate", self.ppo_deck(), "scheduler.policy=" + policy)
        self.assertFault(res, 2, r"policy file '%s' is corrupt: its tensor archive is not a LibTorch archive "
                         r"\(it has no 'version' record\)" % re.escape(policy))
        for raw in ("Could this error message", "hasRecord", "Exception raised from", "c10::"):
            self.assertNotIn(raw, res.text)

    def test_tensor_data_shorter_than_its_shape(self):
        """A stamped archive whose first tensor's data record holds 4 bytes (or half) of a [32, 19] tensor: LibTorch
        read past it, so the same file was refused once ('non-finite weights') and ran the next time, or ran with
        other makespans each time."""
        src = self.shipped_archive()
        for cut in (4, 1216):
            policy = self.stamped("short%d.pt" % cut, self.zipped(
                (i.filename, src.read(i.filename)[:cut] if i.filename.endswith("/data/0") else src.read(i.filename))
                for i in src.infolist()))
            for _ in range(2):
                res = run1("validate", self.ppo_deck(), "scheduler.policy=" + policy)
                self.assertFault(res, 2, r"policy file '%s' is corrupt: its tensors' data records hold \d+ bytes, their "
                                 r"shapes need \d+" % re.escape(policy))

    def test_train_policy_refuses_a_policy_to_plan_with(self):
        # It was ignored: the trained policy came out byte for byte as without it, a corrupt one too.
        policy = os.path.join(SOURCE, "inputs", "policies", "default.pt")
        res = run1("train-policy", self.ppo_deck(), "scheduler.policy=" + policy)
        self.assertFault(res, 2, r"scheduler\.policy = '%s' names a policy to plan with, which train-policy does not "
                         r"read .*leave scheduler\.policy empty" % re.escape(policy))
        self.assertFalse(os.path.exists(self.out))

    def test_archive_faults_in_our_words(self):
        """A stamped archive without a tensor's data record, or with a file outside its folder, printed c10's text
        ('PytorchStreamReader failed locating file data/5: file not found', '[enforce fail at
        inline_container.cc:129] . file in archive is not in a subdirectory')."""
        src = self.shipped_archive()
        records = [(i.filename, src.read(i.filename)) for i in src.infolist()]
        # A newer format version: LibTorch's 'please upgrade PyTorch' is not advice a conductor user can follow.
        newer = [(n, b"99\n" if n.endswith("/version") else d) for n, d in records]
        for name, entries, why in (
                ("missing.pt", [r for r in records if not r[0].endswith("/data/5")], r"it has no 'data/5' record"),
                ("stray.pt", [("hello.txt", b"hi")] + records, r"file in archive is not in a subdirectory: hello\.txt"),
                ("newer.pt", newer, r"its format version 99 is not one this conductor's LibTorch reads: written by "
                 r"another LibTorch, or damaged")):
            policy = self.stamped(name, self.zipped(entries))
            res = run1("validate", self.ppo_deck(), "scheduler.policy=" + policy)
            self.assertFault(res, 2, r"policy file '%s' is corrupt: .*\(%s\)" % (re.escape(policy), why))
            for raw in ("enforce fail", "PytorchStreamReader", "inline_container", "c10::", "upgrade PyTorch"):
                self.assertNotIn(raw, res.text)
        # The header's heuristic: backfill is a readiness hint, never a policy's guide (it was taken as one).
        with open(os.path.join(SOURCE, "inputs", "policies", "default.pt"), "rb") as f:
            data = f.read()
        policy = os.path.join(self.tmp.name, "backfill.pt")
        with open(policy, "wb") as f:
            f.write(re.sub(rb"heuristic=\w+", b"heuristic=backfill", data, count=1))
        res = run1("validate", self.ppo_deck(), "scheduler.policy=" + policy)
        self.assertFault(res, 2, r"its header's heuristic 'backfill' is not one a policy is trained with")


if __name__ == "__main__":
    unittest.main()
