// APNs module
