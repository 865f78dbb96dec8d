#!/usr/bin/python3
"""Fault suite: decks a user gets wrong that already fail cleanly (kept green as the suite grows)."""
import unittest

from faultlib import FaultCase, mpirun, run1


class DeckInputs(FaultCase):
    def test_missing_deck_file(self):
        self.assertFault(run1("validate", self.tmp.name + "/nope.yaml"), 2, r"nope\.yaml")

    def test_wrong_rank_count(self):
        self.assertFault(mpirun(3, "run", self.deck(p=2)), 2, r"parallel\.pipeline")


if __name__ == "__main__":
    unittest.main()
