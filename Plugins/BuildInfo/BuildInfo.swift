import Foundation
import PackagePlugin

/// Writes the git commit Herald is built from into `BuildCommit.swift` of the target it serves
/// (`HeraldBuildInfo`), so `herald --version`, the worker's startup log line and the
/// `herald_build_info` gauge name the exact code running.
///
/// A prebuild command, because it must run on every build: a new commit changes no source file
/// SwiftPM watches. The script rewrites the file only when the commit changed, so an unchanged
/// commit recompiles nothing. Where there is no git repository (a source tarball, a Docker build
/// context without `.git`) the commit comes from the environment variable `HERALD_COMMIT`, else
/// it is `unknown`.
@main
struct BuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "Generated")
        let script = context.package.directoryURL.appending(path: "Plugins/BuildInfo/build-commit.sh")
        let environment = ProcessInfo.processInfo.environment
        return [
            .prebuildCommand(
                displayName: "Herald build info: git commit of \(context.package.directoryURL.path)",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [script.path, context.package.directoryURL.path, output.appending(path: "BuildCommit.swift").path],
                environment: [
                    "PATH": environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin",
                    "HERALD_COMMIT": environment["HERALD_COMMIT"] ?? "",
                ],
                outputFilesDirectory: output),
        ]
    }
}
