"""The small corpus, covered questions and off-topic questions the agent and HTTP tests share."""

from __future__ import annotations

from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from tools.ingest import SourceDocument

DOCUMENTS = [
    SourceDocument("b12", "Vitamin B12", "Vitamin B12 deficiency raises plasma homocysteine in older adults.", "t", {}),
    SourceDocument("folate", "Folate", "Folate intake lowers homocysteine levels in adults.", "t", {}),
    SourceDocument("mri", "Diffusion MRI", "Diffusion tensor imaging of newborn white matter.", "t", {}),
    SourceDocument("aldh1", "ALDH1", "ALDH1 expression marks breast cancer stem cells.", "t", {}),
]


COVERED = "Vitamin B12 deficiency and homocysteine levels"


OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?": no word in common with DOCUMENTS


