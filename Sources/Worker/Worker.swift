// Worker module
