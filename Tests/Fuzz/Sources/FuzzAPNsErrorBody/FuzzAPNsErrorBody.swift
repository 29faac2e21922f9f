import APNs

/// The input as the body of an APNs error response (or a GOAWAY's debug data), parsed and
/// classified with every status the transport can see. Classifying the raw body must give the
/// same outcome as classifying its parsed reason and timestamp.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let body = UnsafeRawBufferPointer(start: data, count: size)
    let (reason, timestamp) = APNsErrorBody.parse(body)
    for status in [0, 200, 400, 401, 403, 404, 405, 410, 413, 429, 500, 502, 503, 599] {
        let fromBody = ResponseClassifier.classify(status: status, body: body)
        let expected = status == 200
            ? DeliveryOutcome.accepted : ResponseClassifier.classify(status: status, reason: reason, timestamp: timestamp)
        guard fromBody == expected else { fatalError("status \(status): \(fromBody) from the body, \(expected) from its parts") }
    }
    return 0
}
