/// Herald's version and the code it was built from, for `herald --version`, the worker's startup
/// log line, the `herald_build_info` gauge and load-generator reports.
///
/// The version is set here by hand with each release (and CHANGELOG.md says what changed); the
/// commit is written at build time by the BuildInfo plugin (`buildCommit`), so two binaries of one
/// version from different commits still tell themselves apart.
public enum HeraldVersion {
    /// The release version, semantic versioning.
    public static let string = "0.2.0"

    /// The git commit (12 hex digits) the binary was built from; `HERALD_COMMIT` or `unknown` when
    /// the build had no git repository.
    public static let commit = buildCommit

    /// The Swift compiler that built it (major.minor).
    #if swift(>=6.3)
    public static let swift = "6.3"
    #else
    public static let swift = "6"
    #endif

    /// What `herald --version` prints: `herald 0.2.0 (commit 0123456789ab, Swift 6.3)`.
    public static var description: String {
        "herald \(string) (commit \(commit), Swift \(swift))"
    }
}
