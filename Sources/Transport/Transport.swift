// Transport module
