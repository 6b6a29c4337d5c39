"""podnet-portmap's options: conflicting or out-of-range values are code 7 naming
the option (no root)."""

from __future__ import annotations

import pytest

from podnet.errors import CNIError
from podnet.plugins.podnet_portmap import PortmapConf

BASE = {"cniVersion": "1.0.0", "name": "mynet", "type": "podnet-portmap"}


def test_defaults() -> None:
    conf = PortmapConf(BASE)
    assert conf.backend == "iptables" and conf.options.snat and conf.options.mark_masq_bit == 13
    assert conf.options.external_set_mark_chain is None and not conf.options.masq_all
    assert conf.options.mark == "0x2000/0x2000"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"markMasqBit": 32}, "markMasqBit"),
        ({"markMasqBit": -1}, "markMasqBit"),
        ({"markMasqBit": "13"}, "markMasqBit"),
        ({"externalSetMarkChain": "KUBE-MARK-MASQ", "markMasqBit": 14}, "markMasqBit"),
        ({"externalSetMarkChain": ""}, "externalSetMarkChain"),
        ({"externalSetMarkChain": "X" * 29}, "externalSetMarkChain"),
        ({"snat": "yes"}, "snat"),
        ({"masqAll": 1}, "masqAll"),
        ({"conditionsV4": "! -d 192.0.2.0/24"}, "conditionsV4"),
        ({"conditionsV6": [1]}, "conditionsV6"),
        ({"backend": "ebtables"}, "backend"),
        ({"backend": "nftables", "conditionsV4": ["!", "-d", "192.0.2.0/24"]}, "conditionsV4"),
        ({"backend": "nftables", "externalSetMarkChain": "KUBE-MARK-MASQ"}, "externalSetMarkChain"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 80}]}}, "hostPort"),
        ({"prevResult": []}, "prevResult"),
    ],
)
def test_bad_options_name_the_key(extra: dict, key: str) -> None:
    with pytest.raises(CNIError) as info:
        PortmapConf({**BASE, **extra})
    assert info.value.code == 7 and key in info.value.msg
