"""Ray's internals we lean on: a loopback-only local Ray, its token auth, and replicas' gRPC on loopback. Written
for Ray 2.60 (:data:`RAY_VERSIONS`); imported only by :mod:`gpen_core.scaleout`, after Ray."""

from __future__ import annotations

from typing import Any

from gpen_core.compat.versions import check_version

RAY_VERSIONS = ((2, 60), (2, 61))
SEAM = "gpen_core.compat.ray (loopback-only Ray)"


def force_loopback_constant() -> None:
    """Make an already imported Ray treat this node as a loopback-only one: Ray reads
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, at import, into ``ray_constants.ENABLE_RAY_CLUSTER``."""
    check_version("ray", RAY_VERSIONS, SEAM)
    from ray._private import ray_constants

    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        raise RuntimeError(f"{SEAM}: ray._private.ray_constants.ENABLE_RAY_CLUSTER is gone in this Ray; "
                           f"install ray in {RAY_VERSIONS} or update the seam")
    ray_constants.ENABLE_RAY_CLUSTER = False


def enable_token_auth() -> bool:
    """What Ray itself does for address "auto" when a token exists: set token mode and reload its config.
    False when this Ray has no such helper (the caller sets ``RAY_AUTH_MODE`` itself)."""
    check_version("ray", RAY_VERSIONS, SEAM)
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    except ImportError:
        return False
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    return True


def keep_replica_grpc_on_loopback() -> None:
    """On a node that advertises 127.0.0.1, bind each replica's inter-deployment gRPC server there too (Ray Serve
    2.60 binds it to ``[::]:0``, every interface). Call it in the replica's constructor; idempotent."""
    try:
        import ray
        from ray.serve._private import replica as replica_module
    except ImportError:
        return
    check_version("ray", RAY_VERSIONS, SEAM)
    original = getattr(replica_module, "add_port_to_grpc_server", None)
    if original is None:
        raise RuntimeError(f"{SEAM}: ray.serve._private.replica.add_port_to_grpc_server is gone in this Ray; "
                           "the replica's gRPC server would listen on every interface. Install ray 2.60.")
    if getattr(original, "gpen_loopback", False) or ray.util.get_node_ip_address() != "127.0.0.1":
        return

    def add_port_on_loopback(server: Any, address: str) -> Any:
        if address.startswith("[::]:"):
            address = "127.0.0.1:" + address.rsplit(":", 1)[1]
        return original(server, address)

    add_port_on_loopback.gpen_loopback = True  # type: ignore[attr-defined]
    replica_module.add_port_to_grpc_server = add_port_on_loopback
