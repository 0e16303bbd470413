"""The test suite. Its tree mirrors the source tree: `tests/agent/core/` tests `agent/core/`, `tests/tools/store/`
tests `tools/store/`, and so on; `tests/contracts/` holds one suite per port, run over the in-memory double and the
real implementation; the modules at this level test the repository as a whole (layout, docs, test signals).

Shared fixtures live in `tests/conftest.py`; shared rigs, doubles and servers in helper modules beside it
(`tests/http_rig.py`, `tests/fake_openai.py`, ...). No test module imports another (`tests/test_layout.py`).
`pytest -m "not stack"` is the fast tier (no servers); the README's test command runs everything.
"""
