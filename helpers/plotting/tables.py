"""A styled pandas table for ``display``: the Styler's HTML where HTML shows (the lab, the book),
the table's own text where only text does (a terminal, a text export), never an object's repr."""

from __future__ import annotations


class Table:
    """``display(Table(frame.style.format(...)))``: HTML from the Styler, plain text from its frame.

    A bare Styler has no text form, so wherever only text is shown it prints as
    ``<pandas.io.formats.style.Styler at 0x...>``; this wrapper prints the frame instead.
    """

    def __init__(self, styler):
        if not hasattr(styler, "to_html") or not hasattr(styler, "data"):
            raise TypeError(f"Table takes a pandas Styler (frame.style...), got {type(styler).__name__}")
        self.styler = styler

    def _repr_html_(self) -> str:
        return self.styler.to_html()

    def __repr__(self) -> str:
        return self.styler.data.to_string()


__all__ = ["Table"]
