import HeraldConfig

/// The input as the text of `herald worker --config` (YAML or JSON): decoded and checked for
/// unknown keys. Every input either parses or is refused with a message naming the file.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let file = try ConfigFile.parse(text, path: "herald.yaml")
        for (name, app) in file.apps ?? [:] { _ = (name, app.bundleID, app.connections) }
    } catch {
        guard error.description.contains("herald.yaml") else { fatalError("a refusal that does not name the file") }
    }
    return 0
}
