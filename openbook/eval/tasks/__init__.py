"""Tasks as small plugins, one file each: a reader, a training target format and metrics per task.

========================  ===============================================  ==============================
name                      what                                             metrics
========================  ===============================================  ==============================
``nq``                    Natural Questions open (NQ-open oracle JSONL)    exact match, F1
``webquestions``          WebQuestions (JSON array ``{qText, answers}``)   exact match, F1
``curatedtrec``           CuratedTrec (TSV; answers are regexes)           regex match
``qa``                    generic ``{question, answers}`` JSONL            exact match, F1
``abstractive``           abstractive QA, ``{input, target}`` JSONL        corpus BLEU-1, ROUGE-L
``jeopardy``              Jeopardy question generation (answer -> clue)    Q-BLEU-1, BLEU-1, ROUGE-L
``fever3`` / ``fever2``   FEVER 3-way / 2-way, labels as one-token targets label accuracy
``boolq``                 BoolQ yes/no, labels as one-token targets        label accuracy
``boolq-passage``         BoolQ with its passage in the input              label accuracy
``kilt``                  any KILT file ``{input, output: [{answer}]}``    exact match, F1
========================  ===============================================  ==============================

``get_task(name)`` returns the task; :data:`TASKS` is the registry. A new task is a subclass of
:class:`~openbook.eval.tasks.base.Task` (or ``ClassificationTask``) registered with
:func:`register_task`.
"""

from __future__ import annotations

from openbook.errors import InputError
from openbook.eval.tasks.abstractive import AbstractiveTask
from openbook.eval.tasks.base import ClassificationTask, Example, Task
from openbook.eval.tasks.boolq import BoolQTask
from openbook.eval.tasks.fever import FeverTask
from openbook.eval.tasks.jeopardy import JeopardyTask
from openbook.eval.tasks.kilt import KiltTask
from openbook.eval.tasks.qa import CuratedTrecTask, NQTask, QATask, WebQuestionsTask

__all__ = ["TASKS", "ClassificationTask", "Example", "Task", "get_task", "register_task", "task_names"]

TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` to :data:`TASKS` under its name (a name may be registered once)."""
    if not task.name or task.name in TASKS:
        raise ValueError(f"task name {task.name!r} is empty or taken")
    TASKS[task.name] = task
    return task


for _task in (
    NQTask(), WebQuestionsTask(), CuratedTrecTask(), QATask(), AbstractiveTask(), JeopardyTask(),
    FeverTask(3), FeverTask(2), BoolQTask(), BoolQTask(with_passage=True), KiltTask(),
):
    register_task(_task)


def task_names() -> list[str]:
    return list(TASKS)


def get_task(name: str) -> Task:
    """The task called ``name``; an unknown name is an InputError listing the known ones."""
    if isinstance(name, Task):
        return name
    task = TASKS.get(name) if isinstance(name, str) else None
    if task is None:
        raise InputError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return task
