#!/usr/bin/python3
"""`conductor schedule`: the text form, torch's CSV and the timeline of a small deck, round trips through
schedule.kind: file: (simulate included), and the messages for bad input (exit 2)."""
import os
import time
import threading
import subprocess
import tempfile
import unittest

BIN = os.environ["CONDUCTOR_BINARY"]

# 1F1B, p = 2, m = 2, every op 1 ms: rank 0 runs F0 F1, waits, BW0 (2 ms) waits, BW1; makespan 9 ms.
DECK = """parallel: {pipeline: 2, microbatches: 2}
schedule: {kind: 1f1b, execution: strict}
cost: {forward: 1, backward_input: 1, backward_weight: 1, comm: 0}
"""


def conductor(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)


class ScheduleCommandTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.deck = self.write("deck.yaml", DECK)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def ok(self, *args):
        proc = conductor("schedule", *args)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def refused(self, *args):
        proc = conductor("schedule", *args)
        self.assertEqual(proc.returncode, 2, proc.stdout)
        return proc.stderr

    def test_text_form(self):
        self.assertEqual(
            self.ok(self.deck),
            "# conductor schedule (1f1b)\npipeline 2\nmicrobatches 2\nvirtual 1\nplacement loop\n"
            "rank 0: 0F0 0F1 0BW0 0BW1\nrank 1: 0F0 0BW0 0F1 0BW1\n",
        )

    def test_a_run_decks_forced_helps_are_no_obstacle(self):
        # A deck that forces helps for conductor run (migration.force) has the same lists: schedule refused it as
        # simulate does (the simulator decides every help itself).
        forced = ["migration.enabled=true", 'migration.force=["1->0:BW:2"]']
        self.assertEqual(self.ok(self.deck, *forced), self.ok(self.deck))
        self.assertIn("forces helps in conductor run only", conductor("simulate", self.deck, *forced).stderr)

    def test_torch_csv(self):
        self.assertEqual(self.ok(self.deck, "--format", "csv"), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n")

    def test_chart(self):
        lines = self.ok(self.deck, "--format", "chart").splitlines()
        self.assertIn("1f1b, p 2, m 2, v 1 (loop placement); simulated step 0: makespan 9 ms, bubble 0.333", lines[0])
        self.assertTrue(lines[1].startswith("one column = 0.09 ms"), lines[1])
        rows = lines[2:]
        self.assertEqual(len(rows), 2)
        for row in rows:
            self.assertEqual(len(row.split("|")[1]), 100, row)
        # Rank 0 starts at once, rank 1 one forward (11 columns) later; rank 1's last op ends the step early.
        self.assertTrue(rows[0].startswith("rank   0 |F0--"), rows[0])
        self.assertTrue(rows[1].startswith("rank   1 |" + "." * 11 + "F0--"), rows[1])
        self.assertIn("BW1", rows[0])
        self.assertTrue(rows[1].endswith(".|"), rows[1])
        # Many short ops: the chart widens (up to 400 columns) until each shows its whole label; 100 columns drew
        # F10 and F11 as 'F1' and dropped most microbatch digits.
        lines = self.ok(self.deck, "--format", "chart", "parallel.pipeline=4", "parallel.microbatches=12",
                        "parallel.virtual=2", "schedule.kind=dualpipev", "model.n_layers=8").splitlines()
        rows = lines[2:]
        self.assertNotIn("too short for their label", lines[1])
        for r, row in enumerate(rows):
            cells = row.split("|")[1]
            self.assertTrue(100 < len(cells) <= 400, row)
            labels = [x for x in cells.replace(".", "-").split("-") if x]
            self.assertEqual(len(labels), len(set(labels)), row)  # every op tells its microbatch apart
            self.assertIn("F11", labels, row)

    def test_zb_v_under_a_looser_limit(self):
        # The published V search is no monotone function of the memory limit: with uneven costs it found a V at 3
        # and 4 M_F but none at 3.5 ("the memory limit of 3.5 M_F per rank is below what it needs ... 0 takes the
        # schedule's own limit, here 3 M_F"), and at p = 4 none from 4.5 M_F on. A V within a tighter limit is
        # within the looser one: every limit from the schedule's own up is met.
        p3 = ["parallel.pipeline=3", "parallel.microbatches=9", "model.n_layers=6", "cost.forward=[0.4,1.5,0.7]",
              "cost.backward_input=[0.7,1.3,1.0]", "cost.backward_weight=[0.3,0.4,0.7]"]
        p4 = ["parallel.pipeline=4", "parallel.microbatches=8", "model.n_layers=8", "cost.forward=[1.2,1.5,0.8,1.0]",
              "cost.backward_input=[1.1,1.8,0.8,0.8]", "cost.backward_weight=[0.4,0.7,0.9,0.4]"]
        shapes = ((("3.5", "4.5", "1000"), p3), (("4.5", "5", "8", "1000"), p4))
        for limits, shape in shapes:
            for limit in ("0",) + limits:
                text = self.ok(self.deck, "backend=emulated", "schedule.kind=zb-v", "parallel.virtual=2",
                               "cost.comm=0.3", "schedule.memory_limit=" + limit, *shape)
                self.assertIn("placement v", text, (shape[0], limit))

    def test_round_trip_through_a_csv_file(self):
        # Every generator round-trips in the schedule layer's tests (sched_tests TorchCsv.*); here the command's.
        for kind, extra in (("zb-v", ["parallel.virtual=2"]),):
            args = [self.deck, "schedule.kind=" + kind, *extra]
            csv = self.write(kind + ".csv", self.ok(*args, "--format", "csv"))
            text = self.ok(*args)
            again = self.ok(self.deck, "schedule.kind=file:" + csv, *extra)
            # Same lists and placement; only the first line (the schedule's name) differs.
            self.assertEqual(again.splitlines()[1:], text.splitlines()[1:], kind)
            self.assertIn("file:" + csv, again.splitlines()[0])
            # The simulator runs the imported schedule: same makespan as the generated one.
            out = os.path.join(self.tmp.name, "sim-" + kind)
            gen = conductor("simulate", *args, "run.steps=1", "trace.enabled=false", "run.output=" + out + "-g")
            imp = conductor("simulate", self.deck, "schedule.kind=file:" + csv, *extra, "run.steps=1",
                            "trace.enabled=false", "run.output=" + out + "-i")
            self.assertEqual(gen.returncode, 0, gen.stderr)
            self.assertEqual(imp.returncode, 0, imp.stderr)
            def figures(out):
                return [l for l in out.splitlines() if l.startswith(("  makespan ", "  bubble ratio"))]
            self.assertEqual(len(figures(gen.stdout)), 3, gen.stdout)  # makespan, makespan / LB, bubble
            self.assertEqual(figures(gen.stdout), figures(imp.stdout), kind)

    def test_csv_too_large_to_read_back_is_refused(self):
        # The CSV grows with p^2 (a slot per comma): at p = 32768 it would be 1.6 GB, over the 1 GiB the schedule
        # reader takes. Refused before a byte is written (it wrote 6.4 GB at p = 65536); the text form still works.
        proc = conductor("schedule", self.deck, "--format", "csv", "parallel.pipeline=32768", "parallel.microbatches=1",
                         "schedule.kind=zb-h1")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertRegex(proc.stderr, r"the CSV of schedule 'zb-h1' \(p = 32768, m = 1, v = 1\) would take \d+ bytes, "
                                      r"over the 1073741824 a schedule file may hold .*use --format text")
        self.assertIn("pipeline 32768", self.ok(self.deck, "parallel.pipeline=32768", "parallel.microbatches=1",
                                                "schedule.kind=zb-h1"))

    def test_csv_with_more_actions_than_a_rank_holds_is_refused_early(self):
        # A line of 4 million actions for p = 2, m = 2 was held whole (28 times the file's size in memory) before
        # validation said "appears twice". Now refused at the first action past 3 x v x m, with the file held once.
        big = self.write("big.csv", "0F0,0B0," * 2_000_000 + "\n,1F0,1B0,1F1,1B1\n")
        code = ("import resource, subprocess, sys; "
                "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
                "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
                "print(p.stderr, end='')")
        proc = subprocess.run(["/usr/bin/python3", "-c", code, BIN, "schedule", self.deck, "schedule.kind=file:" + big],
                              capture_output=True, text=True, timeout=120)
        first, err = proc.stdout.split("\n", 1)
        code, kib = map(int, first.split())
        self.assertEqual(code, 2, err)
        self.assertIn(big + ": rank 0, position 6: action '0F0' is the rank's action number 7, past the 6 a rank "
                      "holds (an F, a B or I and a W of each of its parallel.virtual x parallel.microbatches = 1 x 2 "
                      "chunks and microbatches): an action given twice, or a schedule for more microbatches", err)
        size_kib = os.path.getsize(big) / 1024
        self.assertLess(kib, 6 * size_kib + 100 * 1024, "peak memory %d KiB for a %d KiB file" % (kib, size_kib))

    def test_text_form_with_more_actions_than_a_rank_holds(self):
        t = self.write("t.sched", "pipeline 2\nmicrobatches 2\nrank 0: 0F0 0F1 0BW0 0BW1 0F0 0F1\n  0BW0\n"
                                  "rank 1: 0F0 0BW0\n")
        self.assertIn(t + ":4: action '0BW0' is rank 0's action number 7, past the 3 x virtual x microbatches = 6 "
                      "a rank holds", self.refused(self.deck, "schedule.kind=file:" + t))

    def test_csv_named_otherwise_with_a_quoted_first_field(self):
        # Read as the text form ("unknown key '"0F0",0F1,...'") where its name does not end in .csv.
        q = self.write("q.dat", '"0F0",0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n')
        self.assertIn("rank 0: 0F0 0F1 0BW0 0BW1", self.ok(self.deck, "schedule.kind=file:" + q))

    def test_bad_format(self):
        self.assertIn("--format 'xml' is not a format: text, csv or chart", self.refused(self.deck, "--format", "xml"))
        self.assertIn("flag '--format' needs a value", self.refused(self.deck, "--format"))

    def test_bad_csv_names_file_rank_position_and_reason(self):
        bad = self.write("bad.csv", "0F0,0F1,,0B0,,0X1\n,1F0,1B0,1F1,1B1\n")
        err = self.refused(self.deck, "schedule.kind=file:" + bad)
        self.assertIn(bad + ": rank 0, position 5: unknown action '0X1'", err)
        short = self.write("short.csv", "0F0,0F1,,0B0,,0B1\n")
        self.assertIn(short + ": 1 rank lines but parallel.pipeline = 2", self.refused(self.deck, "schedule.kind=file:" + short))
        missing = self.write("missing.csv", "0F0,0F1,,0B0\n,1F0,1B0,1F1,1B1\n")
        self.assertIn(missing + ": invalid schedule: rank 0, end of list: missing the backward of stage 0, microbatch 1",
                      self.refused(self.deck, "schedule.kind=file:" + missing))
        nofile = os.path.join(self.tmp.name, "nope.csv")
        self.assertIn("cannot read schedule file '" + nofile + "': no such file",
                      self.refused(self.deck, "schedule.kind=file:" + nofile))
        # A relative path is read from the working directory, which the message names (not the deck's folder).
        proc = subprocess.run([BIN, "schedule", self.deck, "schedule.kind=file:nope.csv"], capture_output=True,
                              text=True, timeout=60, cwd=self.tmp.name)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("cannot read schedule file 'nope.csv': no such file (a relative path is read from the working "
                      "directory '%s', not the deck's folder)" % os.path.realpath(self.tmp.name), proc.stderr)
        # Read whole, so a folder, a device (reading /dev/zero never ends) and a file past 1 GiB are refused first.
        self.assertIn("schedule file '" + self.tmp.name + "' is a folder",
                      self.refused(self.deck, "schedule.kind=file:" + self.tmp.name))
        self.assertIn("schedule file '/dev/zero' is a device or socket, not a file",
                      self.refused(self.deck, "schedule.kind=file:/dev/zero"))
        huge = os.path.join(self.tmp.name, "huge.csv")
        with open(huge, "wb") as f:
            f.truncate((1 << 30) + 1)  # sparse: no disk used
        self.assertIn("schedule file '" + huge + "' holds more than 1073741824 bytes",
                      self.refused(self.deck, "schedule.kind=file:" + huge))

    def test_named_pipe(self):
        # A named pipe is read once a writer has opened it (as a shell's <(...) is); with no writer it is refused
        # after 10 s (before: the read blocked forever).
        fifo = os.path.join(self.tmp.name, "pipe.csv")
        os.mkfifo(fifo)
        t0 = time.monotonic()
        self.assertIn("schedule file '" + fifo + "' is a named pipe and nothing was written to it within 10 s",
                      self.refused(self.deck, "schedule.kind=file:" + fifo))
        self.assertLess(time.monotonic() - t0, 25)

        def feed():
            with open(fifo, "w") as f:
                f.write("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n")
        writer = threading.Thread(target=feed)
        writer.start()
        try:
            self.assertIn("rank 1: 0F0 0BW0 0F1 0BW1", self.ok(self.deck, "schedule.kind=file:" + fifo))
        finally:
            writer.join(timeout=30)

    def test_placement_key(self):
        err = self.refused(self.deck, "schedule.placement=v")
        self.assertIn("schedule.placement = v applies to file: schedules", err)
        v_csv = self.write("v.csv", self.ok(self.deck, "schedule.kind=zb-v", "parallel.virtual=2", "--format", "csv"))
        err = self.refused(self.deck, "schedule.kind=file:" + v_csv, "parallel.virtual=2", "schedule.placement=loop")
        self.assertIn(v_csv + ": rank 0, position ", err)
        self.assertIn("under loop placement", err)
        self.assertIn("placement v", self.ok(self.deck, "schedule.kind=file:" + v_csv, "parallel.virtual=2",
                                             "schedule.placement=v"))


if __name__ == "__main__":
    unittest.main()
