import Foundation

/// A fresh private directory under the system's temporary directory, removed with its contents
/// when the last reference goes away: one per test bed, so tests never share files.
final class TemporaryDirectory: Sendable {
    let path: String

    init(prefix: String) throws {
        let template = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(prefix).XXXXXX")
        var bytes = Array(template.utf8CString)
        guard let created = mkdtemp(&bytes) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: template])
        }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func path(_ name: String) -> String {
        (path as NSString).appendingPathComponent(name)
    }
}
