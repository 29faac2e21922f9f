import Observability

/// The input as a request head sent to the metrics port (anyone who can reach it controls it),
/// answered as `MetricsHTTPServer` answers: an HTTP/1.1 response with a Content-Length that
/// matches the body it carries (none for HEAD).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let head = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let body = Array("# TYPE herald_up gauge\nherald_up 1\n".utf8)
    let response = MetricsHTTPServer.respond(to: head) { path in
        path == "/metrics"
            ? MetricsHTTPServer.Response(status: 200, body: body)
            : MetricsHTTPServer.Response(status: 404, body: Array("not found\n".utf8))
    }
    guard response.starts(with: Array("HTTP/1.1 ".utf8)) else { fatalError("a response that is not HTTP/1.1") }
    guard let end = headEnd(response) else { fatalError("a response without the blank line after its head") }
    let text = String(decoding: response[..<end], as: UTF8.self)
    guard let line = text.split(separator: "\r\n").first(where: { $0.hasPrefix("Content-Length: ") }),
          let length = Int(line.dropFirst("Content-Length: ".count))
    else { fatalError("a response without Content-Length") }
    let carried = response.count - end
    guard carried == length || carried == 0 else { fatalError("Content-Length \(length) but \(carried) bytes of body") }
    return 0
}

private func headEnd(_ bytes: [UInt8]) -> Int? {
    guard bytes.count >= 4 else { return nil }
    for index in 3..<bytes.count where bytes[index - 3] == 0x0D && bytes[index - 2] == 0x0A
        && bytes[index - 1] == 0x0D && bytes[index] == 0x0A {
        return index + 1
    }
    return nil
}
