#!/usr/bin/python3
"""The conductor command line: subcommands, --help, --version, usage errors, deck errors (exit 2)."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

BIN = os.environ["CONDUCTOR_BINARY"]
SRC = os.environ["CONDUCTOR_SOURCE_DIR"]
HAVE_POLICY = os.environ.get("CONDUCTOR_HAVE_POLICY") != "0"  # built with the global tier (LibTorch)


def conductor(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def deck(self, text, name="deck.yaml"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_version(self):
        proc = conductor("--version")
        self.assertEqual(proc.returncode, 0)
        self.assertRegex(proc.stdout, r"^conductor \d+\.\d+\.\d+ \(git ")
        # The revision is the source tree's at the last build, not at the last configure: a commit since then
        # (and a build) shows. "-dirty": uncommitted changes to tracked files.
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=SRC, capture_output=True, text=True)
        if head.returncode != 0:
            self.skipTest("the source tree is not a git checkout")
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=SRC).returncode == 1
        self.assertIn("(git %s%s)" % (head.stdout.strip(), "-dirty" if dirty else ""), proc.stdout)

    def test_standard_output_that_fails(self):
        # /dev/full took the resolved deck with exit 0; a reader that quit early (`| head`) ended a simulation by
        # SIGPIPE (exit 141), its results not written.
        with open("/dev/full", "w") as full:
            proc = subprocess.run([BIN, "validate", os.path.join(SRC, "inputs", "quickstart.yaml")], stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("conductor: cannot write to standard output (No space left on device)", proc.stderr)
        out = os.path.join(self.tmp.name, "sim")
        proc = subprocess.Popen([BIN, "simulate", os.path.join(SRC, "inputs", "quickstart.yaml"), "run.steps=3",
                                 "run.output=" + out, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader is gone before a byte is written
        err = proc.stderr.read().decode()
        self.assertEqual(proc.wait(timeout=60), 1, err)
        self.assertIn("cannot write to standard output (Broken pipe)", err)
        with open(os.path.join(out, "summary.json")) as f:
            self.assertEqual(json.load(f)["num_steps"], 3)

    def test_override_values_yaml_would_change(self):
        deck = os.path.join(SRC, "inputs", "quickstart.yaml")
        for value, message in (("a\nb", "run.name: the value holds a line break; an override's value is one line"),
                               ("3\n---\n4", "the value holds a line break"),
                               ("\udcff\udcfe", "run.name: the value is not UTF-8 text (at byte 0)")):
            key = "run.steps" if value.startswith("3") else "run.name"
            arg = (key + "=" + value).encode("utf-8", "surrogateescape")
            proc = subprocess.run([BIN.encode(), b"validate", deck.encode(), arg], capture_output=True, timeout=60)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(message, proc.stderr.decode("utf-8", "replace"))
        # A value YAML reads as syntax: a directive or a tag read as empty (the default run.output, no resume), an
        # anchor dropped its first word, an alias failed with yaml-cpp's own words.
        for arg in ("run.output=%j_out", "checkpoint.resume=!ck", "run.name=&a x", "data.path=*.bin"):
            proc = conductor("validate", deck, arg)
            self.assertEqual(proc.returncode, 2, arg + ": " + proc.stdout)
            key, value = arg.split("=", 1)
            self.assertIn("%s: the value '%s' starts with '%s', which YAML reads as syntax" % (key, value, value[0]),
                          proc.stderr)
            self.assertIn("quote it: %s='\"%s\"'" % (key, value), proc.stderr)
        proc = conductor("validate", deck, 'run.output="%j_out"')
        self.assertIn('output: "%j_out"', proc.stdout)
        # After blanks too, a comment and a document marker, and the quoting given works for quotes and backslashes.
        for arg, start in (("run.output= !ck", "'!'"), ("checkpoint.resume=#ck", "'#'"), ("run.output=---", "'---'")):
            proc = conductor("validate", deck, arg)
            self.assertEqual(proc.returncode, 2, arg + ": " + proc.stdout)
            self.assertIn("starts with %s, which YAML reads as syntax" % start, proc.stderr)
        proc = conductor("validate", deck, 'run.name=!a"b\\c')
        fix = proc.stderr.split("quote it: ")[1].strip()  # run.name='"!a\"b\\c"' as a shell word
        self.assertEqual(fix, "run.name='\"!a\\\"b\\\\c\"'")
        proc = conductor("validate", deck, fix[len("run.name='"):-1].join(("run.name=", "")))
        self.assertIn('name: "!a\\"b\\\\c"', proc.stdout)
        # Text after a closing bracket or quote: YAML read the first list or quoted text and dropped the rest
        # (noise.kind=[gaussian] straggler ran gaussian alone, exit 0). A quote inside a plain text, a list of
        # lists and a text with its spaces inside the quotes are one value.
        for arg, closing, rest in (("noise.kind=[gaussian] straggler", "]", "straggler"),
                                   ("run.name=\"abc\" def", '"', "def"), ("run.output='/tmp/x' y", "'", "y"),
                                   ("run.name={a: 1} x", "}", "x")):
            proc = conductor("validate", deck, arg)
            self.assertEqual(proc.returncode, 2, arg + ": " + proc.stdout)
            self.assertIn("goes on after its closing %s ('%s'), which YAML drops" % (closing, rest), proc.stderr)
        for arg, resolved in (("run.name='it''s'", "name: it's"), ("noise.kind=[gaussian, straggler]", "straggler"),
                              ('run.name="a b"  ', "name: a b")):
            proc = conductor("validate", deck, arg)
            self.assertEqual(proc.returncode, 0, arg + ": " + proc.stderr)
            self.assertIn(resolved, proc.stdout)
        proc = conductor("validate", deck, "noise.kind=" + "[" * 3000)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("the value nests lists or mappings too deep to read", proc.stderr)
        self.assertNotIn("bad file", proc.stderr)
        proc = conductor("x\x1b[2J")  # an escape sequence is shown, not sent to the terminal
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown command 'x\\x1B[2J'", proc.stderr)

    def test_help_lists_commands(self):
        proc = conductor("--help")
        self.assertEqual(proc.returncode, 0)
        for command in ("run", "simulate", "validate", "train-policy"):
            self.assertIn(command, proc.stdout)
            sub = conductor(command, "--help")
            self.assertEqual(sub.returncode, 0, command)
            self.assertIn("usage: conductor " + command, sub.stdout)

    def test_unknown_command_is_usage_error(self):
        proc = conductor("simulte", "x.yaml")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown command 'simulte'", proc.stderr)
        self.assertIn("usage:", proc.stderr)

    def test_unknown_flag_is_usage_error(self):
        proc = conductor("validate", self.deck("run: {}\n"), "--bogus")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown flag '--bogus'", proc.stderr)

    def test_flag_errors_show_the_commands_usage_and_flags_take_equals(self):
        proc = conductor("schedule", self.deck("run: {steps: 1}\n"), "--formt", "csv")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("usage: conductor schedule", proc.stderr)
        self.assertNotIn("commands:", proc.stderr)  # not every command's usage
        deck = self.deck("run: {steps: 1}\n")
        spaced, joined = conductor("schedule", deck, "--format", "csv"), conductor("schedule", deck, "--format=csv")
        self.assertEqual((spaced.returncode, joined.returncode), (0, 0), joined.stderr)
        self.assertEqual(spaced.stdout, joined.stdout)
        proc = conductor("validate", deck, "--keys=1")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("flag '--keys' takes no value", proc.stderr)

    # The environment variables conductor reads take the values README lists; anything else is refused, not ignored.
    def test_bad_environment_values_are_refused(self):
        deck = self.deck("run: {steps: 1}\n")
        for name, value, part in (("CONDUCTOR_LOG", "bogus", "allowed: error, warn, info, debug"),
                                  ("CONDUCTOR_PROGRESS_S", "abc", "a plain decimal >= 0"),
                                  ("CONDUCTOR_PROGRESS_S", "-1", "a plain decimal >= 0"),
                                  ("CONDUCTOR_PROGRESS_S", "0x10", "a plain decimal >= 0"),
                                  ("CONDUCTOR_PROGRESS_S", " 5", "a plain decimal >= 0"),
                                  ("CONDUCTOR_PROGRESS_S", "1e400", "a plain decimal >= 0"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "5s", "allows: 5 .. 1e9 as a plain decimal, or 0 to"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "-3", "allows: 5 .. 1e9"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "inf", "allows: 5 .. 1e9"),
                                  # below the least (a healthy start-up takes seconds), blanks, hexadecimal, and a
                                  # value that reads as 0 (for ever) only by underflow
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "0.001", "allows: 5 .. 1e9"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", " 30", "allows: 5 .. 1e9"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "0x10", "allows: 5 .. 1e9"),
                                  ("CONDUCTOR_INIT_TIMEOUT_S", "1e-400", "allows: 5 .. 1e9")):
            proc = subprocess.run([BIN, "validate", deck], capture_output=True, text=True, timeout=60,
                                  env=dict(os.environ, **{name: value}))
            self.assertEqual(proc.returncode, 2, (name, value))
            self.assertIn("%s = '%s'" % (name, value), proc.stderr)
            self.assertIn(part, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        # OMP_NUM_THREADS: libgomp prints its own line for what it cannot read and went on; a huge count crashed it.
        for value in ("0", "-1", "junk", "", "100000", "4,", "2,0"):
            proc = subprocess.run([BIN, "validate", deck], capture_output=True, text=True, timeout=60,
                                  env=dict(os.environ, OMP_NUM_THREADS=value))
            self.assertEqual(proc.returncode, 2, value)
            self.assertIn("OMP_NUM_THREADS = '%s' is not a thread count; allowed: an integer 1 .. 1024" % value,
                          proc.stderr)
        for name, value in (("CONDUCTOR_LOG", "warn"), ("CONDUCTOR_PROGRESS_S", "0.5"), ("CONDUCTOR_LOG", ""),
                            ("OMP_NUM_THREADS", "3"), ("OMP_NUM_THREADS", "4,2"), ("OMP_NUM_THREADS", " 4"),
                            ("OMP_NUM_THREADS", "4, 2"), ("OMP_NUM_THREADS", "+4"), ("OMP_NUM_THREADS", "0004 ")):
            proc = subprocess.run([BIN, "validate", deck], capture_output=True, text=True, timeout=60,
                                  env=dict(os.environ, **{name: value}))
            self.assertEqual(proc.returncode, 0, (name, value, proc.stderr))

    def test_missing_deck_argument(self):
        self.assertEqual(conductor("validate").returncode, 2)
        self.assertEqual(conductor().returncode, 2)

    def test_missing_deck_file(self):
        proc = conductor("validate", os.path.join(self.tmp.name, "nope.yaml"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("nope.yaml: cannot open file", proc.stderr)

    def test_validate_prints_resolved_deck(self):
        proc = conductor("validate", self.deck("run: {steps: 3}\n"), "parallel.microbatches=12")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("steps: 3", proc.stdout)
        self.assertIn("microbatches: 12", proc.stdout)
        self.assertIn("backend: cpu", proc.stdout)  # a default, printed
        # The resolved deck is itself a valid deck that resolves to the same text.
        again = conductor("validate", self.deck(proc.stdout, "resolved.yaml"))
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, proc.stdout)

    def test_validate_output_for_applies_the_commands_rules(self):
        # The job scripts check a deck with `validate --output-for run` before it waits in the queue; run's own
        # rules (one helper per op, weights on demand, more than one slice) passed there and failed in the job.
        deck = os.path.join(SRC, "inputs", "quickstart.yaml")
        for key, message in (("migration.helpers=2", "conductor run sends an op's slices to one helper only"),
                             ("migration.weights=replicas", "conductor run sends weight slices on demand only"),
                             ("migration.slices=1", "migration.slices = 1 makes each op one slice")):
            for flags in (["--output-for", "run"], []):  # plain validate checks as run would too (README)
                proc = conductor("validate", deck, "migration.enabled=true", key, *flags)
                self.assertEqual(proc.returncode, 2, key + ": " + proc.stdout)
                self.assertIn(message, proc.stderr)
            proc = conductor("validate", deck, "migration.enabled=true", key, "--output-for", "simulate")
            self.assertEqual(proc.returncode, 0 if key != "migration.slices=1" else 2, key + ": " + proc.stderr)
        # This one process is not the job's ranks: any pipeline passes.
        proc = conductor("validate", deck, "parallel.pipeline=3", "--output-for", "run")
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_validate_reads_data_headers(self):
        # A shard that is not one fails validate (the job scripts' check), not the run after a queue wait; the
        # tokens themselves are checked when a run opens the files.
        def shard(name, magic):
            path = os.path.join(self.tmp.name, name)
            with open(path, "wb") as f:
                f.write(struct.pack("<256i", magic, 1, 200, *([0] * 253)) + struct.pack("<200H", *range(200)))
            return path

        good, bad = shard("good.bin", 20240520), shard("bad.bin", 20240521)
        deck = self.deck("run: {}\n")
        ok = conductor("validate", deck, "data.source=llmc", "data.path=" + good)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        for paths in (["data.path=" + bad], ["data.path=" + good, "data.valid_path=" + bad]):
            proc = conductor("validate", deck, "data.source=llmc", *paths)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            key = paths[-1].split("=")[0]
            self.assertIn(key + ": '" + bad + "' is not an llm.c token shard: header magic 20240521", proc.stderr)

    def test_resolved_numbers_are_shortest_text(self):
        # A double prints as the shortest text that reads back the same: 0.006, not 0.0060000000000000001.
        proc = conductor("validate", self.deck("optim: {lr: 0.006, beta2: 0.95}\n"), "noise.level=1e-7")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("  lr: 0.006\n", proc.stdout)
        self.assertIn("  beta2: 0.95\n", proc.stdout)
        self.assertIn("  level: 1e-07\n", proc.stdout)

    @unittest.skipIf(os.environ.get("CONDUCTOR_HAVE_POLICY") != "0", "this build has the global tier")
    def test_train_policy_needs_the_global_tier(self):
        # Without LibTorch the command says why and what to do, with the usage exit code.
        proc = conductor("train-policy", self.deck("parallel: {pipeline: 2, microbatches: 4}\n"))
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("-DCONDUCTOR_POLICY=OFF", proc.stderr)

    @unittest.skipIf(os.environ.get("CONDUCTOR_HAVE_POLICY") == "0",
                     "built with -DCONDUCTOR_POLICY=OFF: no train-policy (test_train_policy_needs_the_global_tier)")
    def test_train_policy_curve_is_exact(self):
        # curve.csv holds one row per PPO iteration, every number written exactly (shortest round-trip text),
        # not cut to 6 decimals.
        out = os.path.join(self.tmp.name, "tp")
        deck = self.deck("run: {output: %s}\nparallel: {pipeline: 2, microbatches: 4}\n"
                         "ppo: {iterations: 2, episodes: 2, eval_steps: 2}\n" % out)
        proc = conductor("train-policy", deck)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "curve.csv")) as f:
            header, *rows = [line.rstrip("\n").split(",") for line in f]
        self.assertEqual(header[2], "sampled_makespan_ms")
        self.assertEqual(len(rows), 2)
        for row in rows:
            self.assertEqual(len(row), len(header))
            float(row[-1])  # seconds: wall time, a number of any size
            for text in row[2:-1]:
                if text != "0":
                    self.assertEqual(repr(float(text)), text)  # shortest text of that double
            self.assertGreater(len(row[2].split(".")[1]), 6, row[2])  # this seed's makespan is not a round number

    @unittest.skipIf(os.environ.get("CONDUCTOR_HAVE_POLICY") == "0", "built with -DCONDUCTOR_POLICY=OFF: no train-policy")
    def test_train_policy_progress(self):
        # One progress line per iteration on stderr with CONDUCTOR_PROGRESS_S=0 (rate-limited to 1 s by default).
        out = os.path.join(self.tmp.name, "tp")
        deck = self.deck("run: {output: %s}\nparallel: {pipeline: 2, microbatches: 4}\n"
                         "ppo: {iterations: 2, episodes: 1, eval_steps: 1}\n" % out)
        proc = subprocess.run([BIN, "train-policy", deck], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, CONDUCTOR_PROGRESS_S="0"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if l.startswith("train-policy: ")]
        self.assertEqual(len(lines), 2, proc.stderr)
        self.assertRegex(lines[0], r"^train-policy: 1/2 iterations \( +50%\), elapsed [0-9.]+ s, ETA [0-9.]+ s$")
        self.assertRegex(lines[1], r"^train-policy: 2/2 iterations \(100%\), elapsed .*, ETA 0\.0 s$")

    def test_ppo_tuning_only_with_ppo(self):
        # scheduler.ema and scheduler.verify_samples tune the ppo scheduler only: beside another kind a value other
        # than the default changed nothing, silently. Refused where it was set; at the default, or with ppo, fine.
        static = self.deck("scheduler: {kind: static, ema: 0.9}\n")
        proc = conductor("validate", static)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(static + ": scheduler.ema = 0.9 applies to scheduler.kind ppo only, and scheduler.kind = "
                      "static does not read it; set scheduler.kind=ppo, or leave scheduler.ema at its default "
                      "(scheduler.ema=0.5)", proc.stderr)
        proc = conductor("validate", static, "scheduler.ema=0.5", "scheduler.verify_samples=4")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertNotIn("scheduler.ema =", proc.stderr)
        self.assertIn("command line 'scheduler.verify_samples=4': scheduler.verify_samples = 4 applies to "
                      "scheduler.kind ppo only", proc.stderr)
        for args in (("scheduler.ema=0.5",), ("scheduler.kind=ppo",), ("scheduler.kind=ppo", "scheduler.verify_samples=4")):
            proc = conductor("validate", static, *args)
            if "scheduler.kind=ppo" in args and not HAVE_POLICY:  # validate makes the planner a run would make
                self.assertEqual(proc.returncode, 2, (args, proc.stderr))
                self.assertIn("-DCONDUCTOR_POLICY=OFF", proc.stderr)
                continue
            self.assertEqual(proc.returncode, 0, (args, proc.stderr))

    def test_policy_only_with_ppo(self):
        # scheduler.policy beside a kind that reads no policy was ignored: the run said nothing and ran without it.
        # Refused where it was set, naming the key, the kind and the kind that uses it; empty, or with ppo, it is fine.
        static = self.deck("scheduler: {kind: static, policy: mine.pt}\n")
        proc = conductor("validate", static)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(static + ": scheduler.policy = 'mine.pt' applies to scheduler.kind ppo only, and "
                      "scheduler.kind = static reads no policy; set scheduler.kind=ppo to run that policy, or leave "
                      "scheduler.policy empty", proc.stderr)
        ppo = self.deck("scheduler: {kind: ppo}\n", "ppo.yaml")
        proc = conductor("validate", ppo, "scheduler.policy=mine.pt", "scheduler.kind=static")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("command line 'scheduler.policy=mine.pt': scheduler.policy = 'mine.pt' applies to "
                      "scheduler.kind ppo only", proc.stderr)
        out = os.path.join(self.tmp.name, "sim")
        proc = conductor("simulate", static, "run.output=" + out, "run.steps=1")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertFalse(os.path.exists(out))
        # validate makes the planner a run would make: the policy must be there (the shipped one).
        shipped = "scheduler.policy=" + os.path.join(SRC, "inputs", "policies", "default.pt")
        for args in ((ppo, shipped), (static, "scheduler.policy="),
                     (static, "scheduler.policy=''")):
            proc = conductor("validate", *args)
            if args[0] == ppo and not HAVE_POLICY:
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn("-DCONDUCTOR_POLICY=OFF", proc.stderr)
                continue
            self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_misspelled_section(self):
        path = self.deck("run:\n  steps: 2\nschedul:\n  kind: 1f1b\n")
        proc = conductor("validate", path)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(path + ":3:1: unknown key 'schedul'; did you mean 'schedule'?", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)

    def test_override_type_error(self):
        proc = conductor("validate", self.deck("run: {}\n"), "parallel.pipeline=abc")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("parallel.pipeline: expected an integer, got 'abc'", proc.stderr)

    def test_unknown_override_path(self):
        proc = conductor("validate", self.deck("run: {}\n"), "parallel.pipe=4")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown key 'parallel.pipe'", proc.stderr)

    def test_stray_argument(self):
        # A word after the deck that is no override is taken for a fragment file, and the message says so.
        proc = conductor("validate", self.deck("run: {}\n"), "extra")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("extra: no such fragment file (arguments after the deck are YAML fragments", proc.stderr)

    def test_fragments_compose_in_order(self):
        # DECK FRAGMENT @FRAGMENT key=value: fragments merge in order (maps key by key, lists replaced whole),
        # the override last; simulate records the sources at the top of resolved.yaml.
        out = os.path.join(self.tmp.name, "sim")
        deck = self.deck("run: {steps: 1, output: %s}\nparallel: {pipeline: 2, microbatches: 2}\n"
                         "noise: {kind: [gaussian, straggler], level: 0.1, seed: 3}\n" % out)
        first = self.deck("noise:\n  kind:\n    - gaussian\n  level: 0.2\nrun: {seed: 11}\n", "first.yaml")
        second = self.deck("noise: {level: 0.3}\nrun: {seed: 12}\n", "second.yaml")
        proc = conductor("validate", deck, first, "@" + second, "run.seed=13")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("  kind: [gaussian]\n  level: 0.3\n  seed: 3\n", proc.stdout)
        self.assertIn("  seed: 13\n", proc.stdout)
        proc = conductor("simulate", deck, "@" + first, second, "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "resolved.yaml")) as f:
            resolved = f.read()
        self.assertTrue(resolved.startswith("# conductor resolved deck"), resolved[:200])
        self.assertIn("#   deck %s\n#   fragment %s\n#   fragment %s\n" % (deck, first, second), resolved)
        self.assertIn("  level: 0.3\n", resolved)
        # The same composition again: the folder holds this very deck, so the deterministic simulation may
        # write it again; the resolved deck itself (other sources, same keys) is the same deck, too.
        self.assertEqual(conductor("simulate", deck, first, second).returncode, 0)
        again = conductor("simulate", os.path.join(out, "resolved.yaml"))
        self.assertEqual(again.returncode, 0, again.stderr)

    def test_fragment_problems_are_located(self):
        deck = self.deck("run: {steps: 2}\n")
        frag = self.deck("noise:\n  level: 0.1\n  levl: 2\n", "frag.yaml")
        proc = conductor("validate", deck, frag, "parallel.pipeline=x")
        self.assertEqual(proc.returncode, 2)
        self.assertIn(frag + ":3:3: unknown key 'noise.levl'; did you mean 'noise.level'?", proc.stderr)
        self.assertIn("command line 'parallel.pipeline=x': parallel.pipeline: expected an integer, got 'x'",
                      proc.stderr)

    def test_fragment_files_are_checked_like_decks(self):
        deck = self.deck("run: {steps: 2}\n")
        cases = [
            (self.tmp.name, r"is a folder; the fragment is a YAML file"),
            (self.deck("# nothing\n", "empty.yaml"), r"empty\.yaml: the fragment is empty \(no keys\)"),
            (self.deck("run: {}\n" + "# padding\n" * 120000, "big.yaml"),
             r"big\.yaml: 1200008 bytes; a fragment is at most 1048576 bytes"),
            (os.path.join(self.tmp.name, "nope.yaml"), r"nope\.yaml: no such fragment file"),
        ]
        for path, message in cases:
            proc = conductor("validate", deck, "@" + path)
            self.assertEqual(proc.returncode, 2, path)
            self.assertRegex(proc.stderr, message)

    def test_fragment_after_override_is_refused(self):
        frag = self.deck("run: {steps: 5}\n", "frag.yaml")
        proc = conductor("validate", self.deck("run: {}\n"), "run.steps=3", frag)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("write fragments before the key.path=value overrides", proc.stderr)

    def test_keys_takes_no_deck(self):
        # --keys prints the schema; a deck beside it was silently ignored (exit 0, as if checked).
        for extra in (["missing.yaml"], [self.deck("run: {}\n")], ["run.steps=3"], ["--as", "run"]):
            proc = conductor("validate", "--keys", *extra)
            self.assertEqual(proc.returncode, 2, extra)
            self.assertIn("--keys takes no DECK, fragment, override or other flag", proc.stderr)
            self.assertEqual(proc.stdout, "")
        self.assertIn("(got the flag --as)", conductor("validate", "--keys", "--as", "run").stderr)

    def test_keys_documented(self):
        proc = conductor("validate", "--keys")
        self.assertEqual(proc.returncode, 0)
        with open(os.path.join(SRC, "docs", "deck.md")) as f:
            doc = f.read()
        rows = [line for line in proc.stdout.splitlines() if line.startswith("| `")]
        for line in rows:
            key = line.split("`")[1]
            self.assertIn("`" + key + "`", doc, "docs/deck.md misses " + key)
            # Each row as the schema prints it now: run scripts/gen-deck-doc.sh after changing a key.
            self.assertIn(line + "\n", doc, "docs/deck.md is out of date for " + key)
        # A section's keys form one table; a default is the code's, not a value derived from other keys
        # (0 = the schedule kind's own limit, -1 = from the model).
        self.assertEqual(proc.stdout.count("### `trace`"), 1)
        self.assertIn("| `schedule.memory_limit` | number | `0` |", proc.stdout)
        self.assertIn("| `cost.memory_after_b` | number | `-1` |", proc.stdout)
        self.assertIn("| `ppo.learning_rate` | number | `0.003` | 1e-07 .. 1 |", proc.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
