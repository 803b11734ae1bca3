"""The HTTP transport of :class:`~statemachine_wf.adapters.ethereum.client.EthereumClient`."""

from __future__ import annotations

import os

import requests
import requests.adapters
import requests.utils


def http_session(url: str, *, pool: int = 64) -> requests.Session:
    """One HTTP session for every thread of a client, the environment read once.

    With ``trust_env`` on, requests looks for ``~/.netrc`` and reads the proxy and CA
    variables on *every* request: a file lookup per JSON-RPC call, 4-6 % of a chain step's
    CPU in ``python -m bench chain``'s profile. They are read here once and kept (the
    proxies for this URL, ``NO_PROXY`` honoured; netrc credentials; a CA bundle), so a node
    behind a proxy or with a private CA still works. One pool of ``pool`` connections
    serves the runner's threads (web3's default, a session per thread, kept at most 100).
    """
    session = requests.Session()
    session.proxies.update(requests.utils.get_environ_proxies(url))
    auth = requests.utils.get_netrc_auth(url)
    if auth:
        session.auth = auth
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
