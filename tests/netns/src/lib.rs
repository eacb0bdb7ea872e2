//! Tests across network namespaces (the UDP device). Placeholder until the device lands.
