#!/usr/bin/python3
"""Fault suite: deck and fragment files a user gets wrong (a folder, an empty or huge file, repeated keys,
aliases, empty and ignored values): each an exit 2 with one message at the right place, before anything runs."""
import os
import re
import unittest

from faultlib import FaultCase, mpirun, run1


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
        for ok in ('"pol/x #y.pt"', "pol/x#y.pt"):
            r = run1("validate", deck, "scheduler.policy=" + ok)
            self.assertEqual(r.code, 0, r.text)
            self.assertIn("policy: " + ok, r.text)

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
        self.assertLess(r.seconds, 10)

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
