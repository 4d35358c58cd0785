"""The daemon's ordinal of a process's CUDA device, matched by PCI address (no GPU needed)."""
import errno

import pytest

from s3gds._cuda import daemon_ordinal, parse_pci_bus_id

DAEMON = [
    {"ordinal": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:1B:00.0"},
    {"ordinal": 1, "name": "NVIDIA H200", "pci_bus_id": "0000:2C:00.0"},
    {"ordinal": 2, "name": "NVIDIA H200", "pci_bus_id": "0001:9D:00.0"},
]


def test_parse_pci_bus_id_as_cuda_and_nvidia_smi_spell_it():
    assert parse_pci_bus_id("0000:1B:00.0") == (0, 0x1B, 0)
    assert parse_pci_bus_id("00000001:9d:01.0") == (1, 0x9D, 1)
    assert parse_pci_bus_id("") is None
    assert parse_pci_bus_id(None) is None
    assert parse_pci_bus_id("garbage") is None


def test_a_process_shown_one_gpu_names_the_daemons_ordinal_of_it():
    # CUDA_VISIBLE_DEVICES=2: the process's cuda:0 is the daemon's device 2.
    assert daemon_ordinal(0, DAEMON, local_pci=(1, 0x9D, 0)) == 2
    assert daemon_ordinal(1, DAEMON, local_pci=(0, 0x1B, 0)) == 0


def test_ordinals_are_kept_where_no_side_names_addresses():
    standin = [{"ordinal": 0, "name": "host-standin"}]
    assert daemon_ordinal(0, standin, local_pci=(0, 0x1B, 0)) == 0
    assert daemon_ordinal(3, [], local_pci=(0, 0x1B, 0)) == 3
    assert daemon_ordinal(3, None) == 3


def test_a_device_the_daemon_does_not_see_is_enodev_naming_both():
    with pytest.raises(OSError) as e:
        daemon_ordinal(0, DAEMON, local_pci=(0, 0x3E, 0))
    assert e.value.errno == errno.ENODEV
    assert "0000:3e:00" in str(e.value) and "0: 0000:1b:00" in str(e.value)
