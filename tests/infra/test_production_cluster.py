"""What differs per cluster (storage classes, image registry, GPU node selectors, workload identity) is set in one
file per kustomization (`k8s/base/cluster.yaml` + the base's `images:`, and `k8s/overlays/trtllm/cluster.yaml` for
that overlay's own objects), documented in one table (README "Per-cluster settings"), and every kustomization
renders with them: as committed, and with another cluster's values filled in (GKE's here)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.external_tools import kubectl

PROD_DIR = REPO_ROOT / "infra" / "production"
K8S_DIR = PROD_DIR / "k8s"
DEPLOYABLE = ["base", "overlays/trtllm", "overlays/gateway-api", "overlays/embedder-mig"]
CLUSTER_FILES = [K8S_DIR / "base" / "cluster.yaml", K8S_DIR / "overlays" / "trtllm" / "cluster.yaml"]
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
UPSTREAM_HUB_IMAGES = {"pgvector/pgvector", "amazon/aws-cli"}
"""Images that are Docker Hub's own (an organisation/name): not built here, pulled from where they are published."""
NODE_LABEL = "nvidia.com/gpu.product"
IRSA_ROLE = "arn:aws:iam::111122223333:role/triton-rag-model-store-reader"
GKE_ACCOUNT = "model-store-reader@rag-project.iam.gserviceaccount.com"
GKE = {
    "triton-rag-rwx": "standard-rwx",
    "triton-rag-rwo": "standard-rwo",
    "registry.example.com/triton-rag": "europe-docker.pkg.dev/rag-project/triton-rag",
    NODE_LABEL: "cloud.google.com/gke-accelerator",
    "NVIDIA-H100-80GB-HBM3": "nvidia-h100-80gb",
    "eks.amazonaws.com/role-arn": "iam.gke.io/gcp-service-account",
    IRSA_ROLE: GKE_ACCOUNT,
}
"""Committed value -> GKE's (Filestore's RWX class, a Persistent Disk class, Artifact Registry, GKE's accelerator
label, Workload Identity)."""


def render(root: Path, kustomization: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(root / kustomization)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {kustomization}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@functools.cache
def committed(kustomization: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(K8S_DIR, kustomization))


def pod_specs(docs: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    specs = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            specs[doc["metadata"]["name"]] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return specs


def claims(docs: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """Every PersistentVolumeClaim spec, the StatefulSets' claim templates included."""
    found = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            for template in doc["spec"].get("volumeClaimTemplates", []):
                found[f"{doc['metadata']['name']}/{template['metadata']['name']}"] = template["spec"]
    return found


def cluster_values() -> dict[str, str]:
    """The storage classes and GPU selector the base's cluster.yaml sets."""
    docs = [d for d in yaml.safe_load_all((K8S_DIR / "base" / "cluster.yaml").read_text()) if d]
    rwx = next(d for d in docs if d["metadata"]["name"] == "triton-hf-cache")["spec"]["storageClassName"]
    rwo = next(d for d in docs if d["metadata"]["name"] == "postgres-backups")["spec"]["storageClassName"]
    return {"rwx": rwx, "rwo": rwo}


@pytest.mark.parametrize("kustomization", DEPLOYABLE)
def test_every_claim_names_a_storage_class_of_its_access_mode(kustomization: str) -> None:
    values = cluster_values()
    for name, spec in claims(committed(kustomization)).items():
        expected = values["rwx"] if spec["accessModes"] == ["ReadWriteMany"] else values["rwo"]
        assert spec.get("storageClassName") == expected, f"{kustomization}: claim {name}"


@pytest.mark.parametrize("kustomization", DEPLOYABLE)
def test_every_image_names_its_registry(kustomization: str) -> None:
    """A bare name (`triton-rag-app:0.1.0`) is pulled from Docker Hub, where the images built here are not."""
    for name, spec in pod_specs(committed(kustomization)).items():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            image = container["image"]
            repository = image.rsplit(":", 1)[0]
            host = repository.split("/")[0]
            assert "." in host or repository in UPSTREAM_HUB_IMAGES, f"{kustomization}: {name} pulls {image}"


@pytest.mark.parametrize("kustomization", DEPLOYABLE)
def test_gpu_pods_select_gpu_nodes(kustomization: str) -> None:
    for name, spec in pod_specs(committed(kustomization)).items():
        limits = [c.get("resources", {}).get("limits", {}) for c in spec["containers"]]
        if any(resource in limit for limit in limits for resource in GPU_RESOURCES):
            assert NODE_LABEL in spec.get("nodeSelector", {}), f"{kustomization}: {name} has no GPU node selector"


def test_the_trtllm_overlay_runs_on_the_gpu_its_engine_was_built_for_and_has_no_vllm_weights() -> None:
    docs = committed("overlays/trtllm")
    assert not [d for d in docs if d["metadata"]["name"] in ("llm-weights-prefetch", "triton-hf-cache")]
    sync = pod_specs(docs)["trtllm-engine-sync"]
    assert sync["serviceAccountName"] == "model-store-reader"
    assert sync["containers"][0]["envFrom"] == [{"secretRef": {"name": "model-store-credentials", "optional": True}}]
    assert pod_specs(docs)["triton-llm"]["nodeSelector"][NODE_LABEL]


@pytest.mark.parametrize("kustomization", DEPLOYABLE)
def test_object_storage_readers_carry_the_workload_identity_service_account(kustomization: str) -> None:
    docs = committed(kustomization)
    account = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "model-store-reader")
    assert account["metadata"].get("annotations"), "the workload-identity annotation is a per-cluster setting"
    for name, spec in pod_specs(docs).items():
        env_from = [e for c in spec["containers"] for e in c.get("envFrom", [])]
        if any(e.get("secretRef", {}).get("name") == "model-store-credentials" for e in env_from):
            assert spec.get("serviceAccountName") == "model-store-reader", f"{kustomization}: {name}"


def test_the_readme_table_names_every_per_cluster_setting() -> None:
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Per-cluster settings") :]
    section = section[: section.index("\n## ", 4)]
    for needle in (
        "k8s/base/cluster.yaml",
        "k8s/overlays/trtllm/cluster.yaml",
        "images:",
        *cluster_values().values(),
        NODE_LABEL,
        "model-store-reader",
        "eks.amazonaws.com/role-arn",
        "iam.gke.io/gcp-service-account",
        "azure.workload.identity/client-id",
        "registry.example.com/triton-rag",
        *[v for v in GKE.values() if "@" not in v and "/" not in v],
    ):
        assert needle in section, needle


@pytest.mark.parametrize("kustomization", DEPLOYABLE)
def test_every_kustomization_renders_with_another_clusters_values(kustomization: str, tmp_path: Path) -> None:
    """GKE's values put into the per-cluster files of a copy of k8s/: they, and only they, change what renders."""
    root = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, root)
    for path in [
        *CLUSTER_FILES,
        K8S_DIR / "base" / "kustomization.yaml",
        K8S_DIR / "overlays/trtllm/kustomization.yaml",
    ]:
        copy = root / path.relative_to(K8S_DIR)
        text = copy.read_text(encoding="utf-8")
        for old, new in GKE.items():
            text = text.replace(old, new)
        copy.write_text(text, encoding="utf-8")
    docs = render(root, kustomization)
    for name, spec in claims(docs).items():
        expected = "standard-rwx" if spec["accessModes"] == ["ReadWriteMany"] else "standard-rwo"
        assert spec["storageClassName"] == expected, name
    specs = pod_specs(docs)
    for name in ("triton-llm", "triton-embedder"):
        assert specs[name]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, name
    built_here = [
        c["image"]
        for spec in specs.values()
        for c in spec["containers"]
        if "triton-rag" in c["image"] and "nvcr.io" not in c["image"]
    ]
    assert built_here and all(i.startswith("europe-docker.pkg.dev/rag-project/triton-rag/") for i in built_here)
    account = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "model-store-reader")
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": GKE_ACCOUNT}
