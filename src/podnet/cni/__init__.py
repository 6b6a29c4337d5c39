"""CNI spec layer: error codes, spec versions, results and the plugin skeleton (CNI spec 1.1.0)."""
