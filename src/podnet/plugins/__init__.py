"""The CNI plugins: each module parses its NetConf, calls the libraries, prints the result."""
