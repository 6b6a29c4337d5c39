"""Firewall state as data: pure functions build nftables text, one backend applies it atomically."""
