"""Search: Monte Carlo tree search over proposed source edits."""
from .mcts import MCTS, Evaluator, SearchConfig
from .reward import REWARD_VERSION, reward
from .tree import Node, Observer, RecordingObserver, normalize_source

__all__ = ["MCTS", "Evaluator", "SearchConfig", "REWARD_VERSION", "reward", "Node", "Observer",
           "RecordingObserver", "normalize_source"]
