"""The settings at their documented path: `from agent.settings import Settings` (for `RagApp(settings)`). They live
in `agent.config.settings`; re-exported here so user code keeps one import path."""

from agent.config.settings import Policy, Settings, SettingsError

__all__ = ["Policy", "Settings", "SettingsError"]
