// MockAPNs module
