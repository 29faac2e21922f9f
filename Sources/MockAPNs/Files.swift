import Glibc

/// Reads a whole text file (certificates, keys); errors name the path.
func readTextFile(_ path: String) throws -> String {
    guard let file = fopen(path, "rb") else {
        throw MockAPNsError.file("cannot read \(path): \(String(cString: strerror(errno)))")
    }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = fread(&buffer, 1, buffer.count, file)
        if count <= 0 { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
}

func writeTextFile(_ path: String, _ text: String) throws {
    guard let file = fopen(path, "wb") else {
        throw MockAPNsError.file("cannot write \(path): \(String(cString: strerror(errno)))")
    }
    defer { fclose(file) }
    let bytes = Array(text.utf8)
    if fwrite(bytes, 1, bytes.count, file) != bytes.count {
        throw MockAPNsError.file("cannot write \(path): \(String(cString: strerror(errno)))")
    }
}

func makeTemporaryDirectory() throws -> String {
    var template = Array("/tmp/herald-mock-apns-XXXXXX".utf8CString)
    guard let result = mkdtemp(&template) else {
        throw MockAPNsError.file("cannot create a temporary directory: \(String(cString: strerror(errno)))")
    }
    return String(cString: result)
}
