"""A server extension of the instructor's lab: Formgrader reads the gradebook afresh at every request.

Formgrader's grade and comment handlers share one long-lived gradebook session
(``settings["nbgrader_gradebook"]``). A row that session has read stays in its identity map until
the session commits, so after ``transformer-course grade --gradebook`` (or nbgrader's own
``autograde``) wrote the database from another process, Formgrader kept showing the scores and
manual grades from before, and a manual grade set on such a page was written onto a stale row.
Here every Formgrader request starts by ending that session's transaction (``rollback``, which
also expires every row it holds), so each request reads what the database holds now. Nothing is
pending between requests: each of Formgrader's handlers commits what it changes.
"""

from __future__ import annotations

import inspect

MODULE = "autograder.formgrader_fresh"


def _jupyter_server_extension_points():
    return [{"module": MODULE}]


def fresh_prepare(original):
    """``original`` (a handler's ``prepare``), preceded by the rollback of Formgrader's shared session."""

    async def prepare(self, *args, **kwargs):
        gradebook = self.settings.get("nbgrader_gradebook")
        if gradebook is not None:
            gradebook.db.rollback()
        result = original(self, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    prepare.fresh = True
    return prepare


def _load_jupyter_server_extension(server_app) -> None:
    from nbgrader.server_extensions.formgrader.base import BaseHandler

    if not getattr(BaseHandler.prepare, "fresh", False):
        BaseHandler.prepare = fresh_prepare(BaseHandler.prepare)
    server_app.log.info("Formgrader reads the gradebook afresh at every request (%s)", MODULE)
