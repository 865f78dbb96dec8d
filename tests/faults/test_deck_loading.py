#!/usr/bin/python3
"""Fault suite: deck and fragment files a user gets wrong (a folder, an empty or huge file, repeated keys,
aliases, empty and ignored values): each an exit 2 with one message at the right place, before anything runs."""
import os
import re
import subprocess
import time
import unittest

from faultlib import BIN, MPIEXEC, FaultCase, Result, mpirun, run1

HAVE_POLICY = os.environ.get("CONDUCTOR_HAVE_POLICY") != "0"  # built with the global tier (LibTorch)


class DeckLoading(FaultCase):
    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_folder_as_deck(self):
        self.assertFault(run1("validate", self.tmp.name), 2, r"is a folder; the deck is a YAML file")
        self.assertFault(mpirun(2, "run", self.tmp.name), 2, r"is a folder; the deck is a YAML file")

    def test_device_as_deck(self):
        # Its size reads as 0, so the size check passed and reading /dev/zero never ended.
        r = run1("validate", "/dev/zero", timeout=20)
        self.assertFault(r, 2, r"/dev/zero: is a device or socket, not a file; the deck is a YAML file")
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        self.assertFault(run1("validate", deck, "/dev/urandom", timeout=20), 2,
                         r"/dev/urandom: is a device or socket, not a file; the fragment is a YAML file")

    def test_named_pipe_as_deck(self):
        # Opening a pipe blocks until a writer opens it: validate (and every rank of a run) waited forever.
        fifo = os.path.join(self.tmp.name, "deck.yaml")
        os.mkfifo(fifo)
        self.assertFault(run1("validate", fifo, timeout=40), 2,
                         r"input file '.*deck\.yaml' is a named pipe and nothing was written to it within 10 s")
        self.assertFault(mpirun(2, "run", fifo, timeout=40), 2, r"is a named pipe and nothing was written to it")

    def test_several_yaml_documents_refused(self):
        # yaml-cpp's Load reads the first document alone: the second was ignored with exit 0.
        deck = self.write("two.yaml", "%YAML 1.2\n---\nrun:\n  steps: 2\n---\nrun:\n  steps: 3\n")
        self.assertFault(run1("validate", deck), 2, r"two\.yaml: holds 2 YAML documents \(separated by `---`\); a "
                         r"deck is one document")
        frag = self.write("frag.yaml", "noise: {level: 0.1}\n---\nnoise: {level: 0.2}\n")
        self.assertFault(run1("validate", self.write("ok.yaml", "run: {name: ok}\n"), frag), 2,
                         r"frag\.yaml: holds 2 YAML documents .* a fragment is one document")
        self.assertEqual(run1("validate", self.write("one.yaml", "---\nrun: {name: one}\n...\n")).code, 0)

    def test_alias_inside_its_own_mapping(self):
        # `x: &x {a: *x}` is a cycle: the repeated-key walk followed it until the stack overflowed (exit 139, in
        # every command and on every rank of a run).
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        for name, text in (("rec.yaml", "x: &x\n  a: *x\n"), ("frag.yaml", "noise: &n {kind: none, extra: *n}\n")):
            args = (self.write(name, text),) if name == "rec.yaml" else (deck, self.write(name, text))
            self.assertFault(run1("validate", *args), 2, name.replace(".", r"\.") +
                             r":1:[0-9]+: '[a-z.]+' nests mappings 9 deep; no deck key is deeper than 8 \(a YAML alias")
        self.assertFault(mpirun(2, "run", deck, self.write("frag2.yaml", "noise: &n {kind: none, extra: *n}\n")), 2,
                         r"nests mappings 9 deep")

    def test_many_unknown_keys_listed_briefly_and_fast(self):
        # Merging a fragment key by key is linear per key in yaml-cpp: 20,000 unknown keys took 27 s, and each
        # got a line of its own.
        many = self.write("many.yaml", "run:\n" + "".join(f"  k{i}: 1\n" for i in range(20000)))
        for args in ((self.write("ok.yaml", "run: {name: ok}\n"), many), (many,)):
            r = run1("validate", *args, timeout=20)
            self.assertFault(r, 2, r"unknown key 'run\.k0'")
            self.assertRegex(r.text, r"\.\.\. and 19980 more unknown keys, not listed")
            self.assertLess(len(r.text.splitlines()), 30, r.text[:2000])
            self.assertLess(r.cpu_seconds, 10)

    def test_text_yaml_cannot_read(self):
        # A NUL byte: yaml-cpp's "unknown escape character" and the raw bytes after it; deep nesting: "bad file".
        self.assertFault(run1("validate", self.write("nul.yaml", "run:\n  steps: 2\x00\n")), 2,
                         r"nul\.yaml:2: holds a NUL byte; a deck is a YAML text file")
        self.assertFault(run1("validate", self.write("deep.yaml", "run:\n  name: " + "[" * 3000 + "]" * 3000 + "\n")),
                         2, r"deep\.yaml:2:[0-9]+: YAML nested too deep to read")
        self.assertFault(run1("validate", self.write("merge.yaml", "run: {<<: {steps: 2}}\n")), 2,
                         r"unknown key 'run\.<<'; YAML merge keys \(<<\) are not read")

    def test_validate_opens_what_a_run_opens(self):
        # validate answered 0 for decks `run` refused at once: data files without one window, a resume folder or
        # a policy file that is not there.
        deck = self.write("ok.yaml", "run: {name: ok}\nmodel: {vocab: 256, seq_len: 16}\n")
        short = self.write("short.bin", "abc")
        self.assertFault(run1("validate", deck, "data.source=file", "data.path=" + short), 2,
                         r"data\.path: '.*short\.bin' holds no window of model\.seq_len \+ 1 = 17 tokens")
        enough = self.write("enough.bin", "x" * 40)
        self.assertEqual(run1("validate", deck, "data.source=file", "data.path=" + enough).code, 0)
        self.assertFault(run1("validate", deck, "data.source=file", "data.path=" + enough, "eval.every=1",
                              "data.valid_fraction=0.1"), 2,
                         r"data\.valid_fraction: '.*enough\.bin' holds no held-out window")
        # The headers only where the command reads them: the emulated backend and the simulator read no data (one
        # override switches a deck), and validate refused what their commands ran.
        for flags in (("backend=emulated",), ("--as", "simulate")):
            self.assertEqual(run1("validate", deck, "data.source=file", "data.path=" + short, *flags).code, 0, flags)
        self.assertFault(run1("validate", deck, "checkpoint.resume=" + self.tmp.name + "/none"), 2,
                         r"checkpoint\.resume = '.*/none': no such folder")
        # A path that cannot be looked up: a raw "filesystem error: status: Too many levels of symbolic links",
        # exit 1 (through MPI_Abort under mpirun).
        os.symlink("loop", os.path.join(self.tmp.name, "loop"))
        self.assertFault(run1("validate", deck, "checkpoint.resume=" + self.tmp.name + "/loop"), 2,
                         r"checkpoint\.resume = '.*/loop': '.*/loop/manifest\.txt' cannot be looked up \(Too many "
                         r"levels of symbolic links\)")
        self.assertFault(run1("validate", deck, "scheduler.kind=ppo", "scheduler.policy=" + self.tmp.name + "/p.pt"),
                         2, r"policy file '.*/p\.pt' cannot be opened \(no such file\)" if HAVE_POLICY
                         else r"-DCONDUCTOR_POLICY=OFF")

    def test_argument_mistakes_said_once_under_mpirun(self):
        # Found before MPI starts, they were printed by every rank (the usage text three times at -n 3).
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        for args, message in ((("--bogus",), r"unknown flag '--bogus' for 'run'"),
                              (("run.steps=2", deck), r"fragment '.*' after the override 'run\.steps=2'")):
            r = mpirun(3, "run", deck, *args)
            self.assertFault(r, 2, message)
            self.assertEqual(len(re.findall(message, r.text)), 1, r.text)
        # The first rank late (a loaded node): the others waited for nothing, exited first, and mpirun killed the
        # first rank before it printed: the mistake went unsaid.
        late_first = ["sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then sleep 1; fi; exec "$0" "$@"', BIN]
        start = time.monotonic()
        proc = subprocess.run([MPIEXEC, "-n", "3", "--oversubscribe", *late_first, "run", deck, "--bogus"],
                              capture_output=True, text=True, timeout=60)
        r = Result(proc, time.monotonic() - start)
        self.assertFault(r, 2, r"unknown flag '--bogus' for 'run'")
        self.assertEqual(len(re.findall(r"unknown flag", r.text)), 1, r.text)
        # An empty argument where the DECK goes made the next one the deck.
        self.assertFault(run1("validate", "", "run.output=x"), 2, r"argument 2 is empty; expected the DECK")

    def test_one_noise_level_for_every_episode(self):
        # The key's type says "number or list of numbers"; a number was refused as "must be two values".
        r = run1("validate", self.write("ok.yaml", "run: {name: ok}\n"), "ppo.noise_levels=0.5")
        self.assertEqual(r.code, 0, r.text)
        self.assertIn("noise_levels: [0.5, 0.5]", r.text)

    def test_long_override_value_is_shortened(self):
        r = run1("validate", self.write("ok.yaml", "run: {name: ok}\n"), "run.nosuch=" + "x" * 100000)
        self.assertFault(r, 2, r"command line 'run\.nosuch=x+\.\.\.'")
        self.assertLess(len(r.text), 2000)

    def test_key_that_is_not_utf8_is_escaped(self):
        # The value's UTF-8 was checked, but a key's bytes reached the terminal as written.
        r = run1("validate", self.write("ok.yaml", "run: {name: ok}\n"), "run.n\udcffame=1")
        self.assertFault(r, 2, r"command line 'run\.n\\xFFame=1': unknown key 'run\.n\\xFFame'")

    def test_values_a_run_cannot_use(self):
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        # optim.eps = 0 passed validation; training then divided 0 by 0 (a NaN loss at step 2).
        self.assertFault(run1("validate", deck, "optim.eps=0"), 2, r"optim\.eps: value 0 is out of range \(allowed: 1e-30 \.\. 1\)")
        for text, why in (('"a\\nb"', r"run\.name = '.*' holds a control character \(byte 10\)"),
                          ("x" * 201, r"run\.name = '.*' has 201 bytes; a run name has at most 200"),
                          # Bytes that are not UTF-8 anywhere in a deck file: the file is refused as text.
                          ("\udcff\udcfe", r"named\.yaml:1: holds bytes that are not UTF-8 text \(byte 12 of the "
                                            r"file\)")):
            named = os.path.join(self.tmp.name, "named.yaml")
            with open(named, "wb") as f:  # the name's bytes as written, 0xff 0xfe for the last
                f.write(("run: {name: " + text + "}\n").encode("utf-8", "surrogateescape"))
            self.assertFault(run1("validate", named), 2, why)

    def test_every_fragments_problems_together(self):
        # A fragment's syntax error used to hide the other fragments' problems.
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        dup = self.write("dup.yaml", "run: {steps: 2}\nrun: {steps: 3}\n")
        bad = self.write("bad.yaml", "run: {steps: [\n")
        wrong = self.write("wrong.yaml", "run: {steps: abc}\n")
        r = run1("validate", deck, dup, bad, wrong)
        self.assertFault(r, 2, r"3 problems in the deck")
        for message in (r"dup\.yaml:2:1: key 'run' appears twice", r"bad\.yaml:2:1: YAML syntax error",
                        r"wrong\.yaml:1:14: run\.steps: expected an integer, got 'abc'"):
            self.assertRegex(r.text, message)

    def test_cross_key_problem_names_where_the_key_was_set(self):
        # Checks of several keys named the deck file even for a value typed on the command line.
        deck = self.write("ok.yaml", "run: {name: ok}\nmodel: {n_heads: 4, d_model: 32}\n")
        r = run1("validate", deck, "migration.enabled=true", "migration.slices=3")
        self.assertFault(r, 2, r"  command line 'migration\.slices=3': migration\.slices = 3 does not divide")
        frag = self.write("noisy.yaml", "noise: {kind: lognormal, level: 5}\n")
        self.assertFault(run1("validate", deck, frag), 2, r"  .*/noisy\.yaml: noise\.level = 5 with noise\.kind lognormal")
        self.assertFault(run1("validate", self.write("n.yaml", "noise: {kind: sample, level: 4}\n")), 2,
                         r"  .*n\.yaml: noise\.level = 4 with noise\.kind sample")

    def test_override_value_with_a_colon(self):
        # `file:` alone reads as a YAML mapping: the message says so and how to quote it.
        r = run1("validate", self.write("ok.yaml", "run: {name: ok}\n"), "schedule.kind=file:")
        self.assertFault(r, 2, r"schedule\.kind: the value 'file:' reads as a YAML mapping .*quote a value with a "
                         r"colon: schedule\.kind='\"file:\"'")

    def test_override_value_with_a_comment(self):
        # ' #' starts a YAML comment: 'pol/x #y.pt' was read as 'pol/x' without a word. Quoted, '#' is kept.
        deck = self.write("ok.yaml", "run: {name: ok}\nscheduler: {kind: ppo}\n")
        r = run1("validate", deck, "scheduler.policy=pol/x #y.pt")
        self.assertFault(r, 2, r"scheduler\.policy: the value 'pol/x #y\.pt' holds ' #', where YAML starts a "
                         r"comment \(the value would be 'pol/x'\); quote it: scheduler\.policy='\"pol/x #y\.pt\"'")
        # validate opens the policy as a run would: the file it names is the whole value (a build without the
        # global tier refuses scheduler.kind ppo first).
        for ok, read in (('"pol/x #y.pt"', "pol/x #y.pt"), ("pol/x#y.pt", "pol/x#y.pt")):
            r = run1("validate", deck, "scheduler.policy=" + ok)
            self.assertFault(r, 2, "policy file '" + re.escape(read) + "' cannot be opened" if HAVE_POLICY
                             else r"-DCONDUCTOR_POLICY=OFF")

    def test_run_name_is_one_folder_name(self):
        # The default run.output is runs/<run.name>: '..' put a run's files in the working folder, '' in runs/.
        deck = self.write("ok.yaml", "run: {name: ok}\n")
        for name in ("", "..", ".", "a/b"):
            self.assertFault(run1("validate", deck, "run.name=" + name), 2,
                             r"run\.name = '%s' must be one folder name" % name.replace(".", r"\."))

    def test_empty_deck(self):
        # (a file of comments only: tests/config)
        self.assertFault(run1("validate", self.write("empty.yaml", "")), 2, r"empty\.yaml: the deck is empty \(no keys\)")

    def test_oversized_deck_refused_before_parsing(self):
        big = self.write("big.yaml", "run: {name: big}\n" + ("# padding\n" * 120000))
        r = run1("simulate", big)
        self.assertFault(r, 2, r"big\.yaml: 1200017 bytes; a deck is at most 1048576 bytes")
        self.assertLess(r.cpu_seconds, 10)

    def test_override_changes_one_key_through_aliases(self):
        deck = self.write("alias.yaml", "run:\n  steps: &n 5\n  seed: *n\n")
        r = run1("validate", deck, "run.steps=7")
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.out, r"steps: 7\n")
        self.assertRegex(r.out, r"seed: 5\n")

    def test_repeated_key_located_in_deck(self):
        deck = self.write("dup.yaml", "run:\n  steps: 3\n  steps: 4\n")
        r = run1("validate", deck, "run.steps=5")
        self.assertFault(r, 2, re.escape(deck) + r":3:3: key 'run\.steps' appears twice \(first at line 2\)")
        self.assertNotIn("command line", r.text)

    def test_fragment_faults_under_mpi(self):
        # Fragments are read on rank 0 and broadcast like the deck: each fault is one message and exit 2 on
        # every rank, located in the fragment.
        self.assertFault(mpirun(2, "run", self.deck(), self.tmp.name), 2, r"is a folder; the fragment is a YAML file")
        self.assertFault(mpirun(2, "run", self.deck(), "@" + self.write("empty.yaml", "# none\n")), 2,
                         r"empty\.yaml: the fragment is empty \(no keys\)")
        dup = self.write("dup.yaml", "noise:\n  level: 0.1\n  level: 0.2\n")
        r = mpirun(2, "run", self.deck(), dup, "noise.level=0.3")
        self.assertFault(r, 2, re.escape(dup) + r":3:3: key 'noise\.level' appears twice \(first at line 2\)")
        self.assertEqual(r.text.count("appears twice"), 1, r.text)

    def test_empty_output_means_default(self):
        r = run1("validate", self.deck(), "run.output=")
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.out, r"output: runs/tiny\n")

    def test_data_path_without_file_source(self):
        self.assertFault(run1("validate", self.deck(), "data.path=/etc/hostname"), 2,
                         r"data\.path = '/etc/hostname' is set but data\.source = 'synthetic' does not read it")


if __name__ == "__main__":
    unittest.main()
