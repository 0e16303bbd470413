"""The service's settings (`agent.config.settings`, pydantic-settings): read from the environment and `.env`, the
bottom layer of `agent/` (it imports nothing of ours)."""
