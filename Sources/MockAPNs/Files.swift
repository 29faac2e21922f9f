import Glibc

func makeTemporaryDirectory() throws -> String {
    var template = Array("/tmp/herald-mock-apns-XXXXXX".utf8CString)
    guard let result = mkdtemp(&template) else {
        throw MockAPNsError.file("cannot create a temporary directory: \(String(cString: strerror(errno)))")
    }
    return String(cString: result)
}
