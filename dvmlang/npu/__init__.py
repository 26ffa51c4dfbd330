"""The simulated Ascend-class NPU: profiles, the device decoder, and cycle accounting."""

from .device import Device, LaunchRecord, default_device, set_default_device, use
from .profile import PROFILES, Profile, get_profile
from .system import System, SystemDevice
from .topology import TOPOLOGIES, Fabric, Topology, get_topology

__all__ = ["Device", "LaunchRecord", "Profile", "PROFILES", "get_profile", "default_device", "set_default_device",
           "use", "System", "SystemDevice", "Topology", "Fabric", "TOPOLOGIES", "get_topology"]
