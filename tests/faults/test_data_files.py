#!/usr/bin/python3
"""Fault suite, token data files: a shard truncated while a run reads it (it was memory-mapped: SIGBUS, a core
dump, no message, the trace left open) ends every rank with one message naming the file, and the trace keeps the
steps done; a resume refuses data files that changed since its checkpoint was written (it trained on other tokens
without a word), unless checkpoint.allow_data_change, and still resumes a checkpoint written before the record."""
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

import h5py

from faultlib import BIN, EXIT_DEADLINE_S, MPIEXEC, Background, FaultCase, Result, mpirun

CPU = "backend: cpu\n"


def write_llmc(path, n, seed=1):
    """An llm.c GPT-2 shard of n uint16 tokens below 64 (any model.vocab >= 64 reads it)."""
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *[rnd.randrange(64) for _ in range(n)]))


def open_trace(path):
    try:
        return h5py.File(path, "r")
    except OSError:
        return h5py.File(path, "r", swmr=True)  # a killed writer's mark; every flushed step is whole


class DataFiles(FaultCase):
    def shard(self, name="train_000.bin", n=200000, seed=1):
        path = os.path.join(self.tmp.name, name)
        write_llmc(path, n, seed)
        return path

    def data_deck(self, shard, steps):
        return self.deck(steps=steps, extra=CPU + "data: {source: llmc, path: '%s'}\n" % shard)

    def changed_mid_run(self, shard, change):
        """A long run on `shard`, which change(file) alters in place after 3 steps; the run's result from then."""
        run = Background([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", self.data_deck(shard, 100000)])
        self.addCleanup(run.kill)
        run.wait_steps(3)
        with open(shard, "r+b") as f:
            change(f)
        start = time.monotonic()
        try:
            run.proc.wait(timeout=EXIT_DEADLINE_S + 30)
        finally:
            run.kill()
        return run.result(start)

    def test_shard_truncated_mid_run(self):
        shard = self.shard()
        # Cut in place, as a shorter file copied over it is.
        r = self.changed_mid_run(shard, lambda f: f.truncate(os.path.getsize(shard) // 2))
        self.assertFault(r, 1, r"data\.path: step \d+ \(microbatch \d+\): '%s' is now 200512 bytes, but \d+ bytes "
                               r"at offset \d+ are needed; it had 401024 bytes when the run opened it" % re.escape(shard))
        self.assertEqual(len([l for l in r.err.splitlines() if "error:" in l]), 1, r.text)
        self.assertNotEqual(r.code, 135, "SIGBUS")
        # Every rank is gone (mpiexec returned), and the trace holds exactly the steps the run printed.
        done = [int(m.group(1)) for m in re.finditer(r"^step +(\d+)/", r.out, re.M)]
        self.assertGreaterEqual(len(done), 3)
        with open_trace(os.path.join(self.out, "trace.h5")) as t:
            steps = [int(s) for s in t["steps"]["step"] if s >= 0]
        self.assertEqual(steps, [s - 1 for s in done])
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            self.assertEqual(len(f.readlines()), len(done))

    def test_shard_rewritten_in_place_with_ids_past_the_vocabulary(self):
        # The same size, other ids: checked only when opened, an id >= model.vocab indexed past the embedding
        # (SIGSEGV, no message, no summary).
        def rewrite(f):
            f.seek(1024)
            f.write(b"\xff\xff" * 199000)

        shard = self.shard()
        r = self.changed_mid_run(shard, rewrite)
        self.assertFault(r, 1, r"data\.path: step \d+ \(microbatch \d+\): token id 65535 \(row \d+, position \d+\) is "
                               r"outside the vocabulary \(model\.vocab = \d+\): '%s' was rewritten since the run "
                               r"opened it; restore the file" % re.escape(shard))
        self.assertEqual(len([l for l in r.err.splitlines() if "error:" in l]), 1, r.text)
        self.assertNotEqual(r.code, 139, "SIGSEGV")
        done = [int(m.group(1)) for m in re.finditer(r"^step +(\d+)/", r.out, re.M)]
        with open_trace(os.path.join(self.out, "trace.h5")) as t:
            self.assertEqual([int(x) for x in t["steps"]["step"] if x >= 0], [x - 1 for x in done])

    def test_file_names_from_a_glob_are_escaped_in_messages(self):
        # A glob's match may hold any byte but '/': a name with an escape sequence reached the terminal raw.
        folder = os.path.join(self.tmp.name, "d")
        os.makedirs(os.path.join(folder, "dir\x1b]0;x.bin"))
        write_llmc(os.path.join(folder, "a.bin"), 20000, 1)
        deck = self.deck(steps=1, extra=CPU + "data: {source: llmc, path: '%s/*.bin'}\n" % folder)
        r = subprocess.run([BIN, "validate", deck], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("names '%s/dir\\x1B]0;x.bin', which is a folder, not a data file" % folder, r.stderr)
        self.assertNotIn("\x1b", r.stderr)

    def test_ranks_that_read_other_files_are_refused(self):
        # Each rank expands data.path and reads its files on its own: a rank that saw other files (a node's stale
        # copy, a glob expanded while shards were being written) trained its stage on other tokens, exit 0. Here
        # each rank starts in its own working folder, where the relative data.path names a shard of other tokens.
        folders = []
        for name, seed in (("a", 1), ("b", 2)):
            folders.append(os.path.join(self.tmp.name, name))
            os.makedirs(folders[-1])
            write_llmc(os.path.join(folders[-1], "shard.bin"), 20000, seed)
        deck = self.deck(steps=2, extra=CPU + "data: {source: llmc, path: shard.bin}\n")
        cmd = [MPIEXEC, "--oversubscribe", "-n", "1", "--wdir", folders[0], BIN, "run", deck, ":",
               "-n", "1", "--wdir", folders[1], BIN, "run", deck]
        start = time.monotonic()
        r = Result(subprocess.run(cmd, capture_output=True, text=True, timeout=EXIT_DEADLINE_S + 60),
                   time.monotonic() - start)
        self.assertFault(r, 2, r"data\.path: rank 1 does not read the data files rank 0 reads \('shard\.bin' has other "
                               r"contents \(CRC-32 0x[0-9a-f]+ now, 0x[0-9a-f]+ then, the same 41024 bytes\)")
        self.assertFalse(os.path.exists(self.out), "the refused run wrote its folder")
        # A glob that matches one more shard on rank 1: named as read there and not by rank 0 (it read "not read
        # by the checkpoint's run", with no checkpoint in the run).
        write_llmc(os.path.join(folders[1], "shard2.bin"), 20000, 3)
        with open(os.path.join(folders[0], "shard.bin"), "rb") as f, open(os.path.join(folders[1], "shard.bin"), "wb") as g:
            g.write(f.read())
        deck = self.deck(steps=2, extra=CPU + "data: {source: llmc, path: 'shard*.bin'}\n")
        cmd[cmd.index(BIN) + 2] = deck
        cmd[len(cmd) - 1] = deck
        r = Result(subprocess.run(cmd, capture_output=True, text=True, timeout=EXIT_DEADLINE_S + 60), 0)
        self.assertEqual(r.code, 2, r.text)
        self.assertRegex(r.text, r"data\.path: rank 1 does not read the data files rank 0 reads \('shard2\.bin' is new "
                                 r"\(not read by rank 0\); 'now' is rank 1")

    def checkpointed(self):
        """A run of 3 steps on one shard with its checkpoint root; returns (shard, root)."""
        shard = self.shard()
        root = os.path.join(self.tmp.name, "ck")
        r = mpirun(2, "run", self.data_deck(shard, 3), "checkpoint.path=" + root)
        self.assertEqual(r.code, 0, r.text)
        with open(os.path.join(root, "step-000003", "manifest.txt")) as f:
            self.assertIn("data_files 1\ndata bytes 401024 crc32 0x", f.read())
        return shard, root

    def resume(self, shard, root, *keys):
        self.out = tempfile.mkdtemp(dir=self.tmp.name)
        os.rmdir(self.out)
        return mpirun(2, "run", self.data_deck(shard, 5), "checkpoint.resume=" + root, *keys)

    def test_resume_refuses_changed_data(self):
        shard, root = self.checkpointed()
        saved = shard + ".saved"
        shutil.copy(shard, saved)
        # Unchanged: resumes, and says nothing about the data.
        r = self.resume(shard, root)
        self.assertEqual(r.code, 0, r.text)
        self.assertNotRegex(r.text, r"data files")
        # The same size, other tokens (re-tokenized): refused before any step, naming the file and the CRC-32s.
        write_llmc(shard, 200000, seed=2)
        r = self.resume(shard, root)
        self.assertFault(r, 2, r"checkpoint\.resume = '.*step-000003': the data files differ from those the "
                               r"checkpoint's run read: '%s' has other contents \(CRC-32 0x[0-9a-f]{8} now, "
                               r"0x[0-9a-f]{8} then, the same 401024 bytes\); .* set checkpoint\.allow_data_change"
                               r"=true" % re.escape(shard))
        self.assertNotRegex(r.text, r"step +\d+/", "a step ran on the changed data")
        self.assertFalse(os.path.exists(self.out), "the refused run wrote its output folder")
        # Another size: named with both sizes.
        write_llmc(shard, 150000)
        r = self.resume(shard, root)
        self.assertFault(r, 2, r"'%s' has 301024 bytes now, 401024 then" % re.escape(shard))
        # Accepted on request, with one warning naming it.
        r = self.resume(shard, root, "checkpoint.allow_data_change=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"warning: .*resuming on data files that differ .*'%s' has 301024 bytes now"
                         % re.escape(shard))
        shutil.copy(saved, shard)
        self.assertEqual(self.resume(shard, root).code, 0)

    def test_checkpoint_without_data_record_resumes(self):
        # A checkpoint written before the record existed (no data_files line): resumed, with a warning.
        shard, root = self.checkpointed()
        manifest = os.path.join(root, "step-000003", "manifest.txt")
        with open(manifest) as f:
            lines = [l for l in f if not l.startswith("data")]
        with open(manifest, "w") as f:
            f.writelines(lines)
        r = self.resume(shard, root)
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"warning: checkpoint\.resume = '.*step-000003': its manifest has no record of "
                                 r"the data files")
        self.assertRegex(r.text, r"step +5/5")


if __name__ == "__main__":
    unittest.main()
