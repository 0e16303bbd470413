"""The Python API at its documented path: `from agent.app import RagApp`. `RagApp` lives in `agent.core.app`, the
parts it composes and their factories in `agent.core.wiring`; re-exported here so user code keeps one import path."""

from agent.core.app import RagApp
from agent.core.wiring import Services, build_embedder, build_retriever, build_services, build_store

__all__ = ["RagApp", "Services", "build_embedder", "build_retriever", "build_services", "build_store"]
