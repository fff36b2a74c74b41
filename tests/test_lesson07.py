"""Lesson 07: every catalogued mistake (in the batches, the training step and the learning-rate
schedule) loses exactly its own exercise's points and is named; correct answers written
differently get full marks."""

from harness import CatalogueTests, catalogue

A = "07-training"


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
