"""Lesson 02: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

from harness import CatalogueTests, catalogue

A = "02-language-models"


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
