"""The evaluation runner: one place that runs a candidate's stages (build, verify and time on the
GPU, profile) in order, for one candidate or many at once, every failure a status."""
from .prepare import Preparer
from .runner import Runner
from .stages import BackgroundStage, BuildStage, CheckStage, FairLock, ProfileStage, SanitizeStage, Stage, Where, standard_stages
from .types import Candidate, Evaluation

__all__ = ["Preparer", "Runner", "BackgroundStage", "BuildStage", "CheckStage", "FairLock", "ProfileStage", "SanitizeStage", "Stage", "Where",
           "standard_stages", "Candidate", "Evaluation"]
