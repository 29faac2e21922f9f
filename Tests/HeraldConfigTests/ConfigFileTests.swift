import Testing

@testable import HeraldConfig

/// The config file's parsing on its own: what the worker refuses before the YAML library builds
/// or decodes a document, and what it must still accept. (The worker's exits with these files are
/// checked end to end in the integration tests.)
@Suite struct ConfigFileTests {
    /// `levels` anchors of ten aliases each over `[x × 10]`: 10^(levels+1) scalars expanded.
    static func nested(levels: Int) -> [String] {
        ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + (1...levels).map { level in
            "a\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ", ") + "]"
        }
    }

    @Test
    func countsEveryValueOnceWithoutAliases() {
        // The root mapping, `threads`, 4, `apps`, its mapping, `default`, its mapping, two pairs.
        let text = "threads: 4\napps:\n  default:\n    connections: 2\n    max_streams: 500\n"
        #expect(ConfigFile.expandedValueCount(text, limit: 100) == 11)
        #expect(ConfigFile.expandedValueCount("", limit: 100) == 0)
        #expect(ConfigFile.expandedValueCount("just text", limit: 100) == 1)
    }

    @Test
    func countsAnAliasAsItsAnchorsWholeNode() {
        // `d` is a mapping of two pairs (5 values); each alias repeats all five.
        let text = "d: &d {connections: 2, max_streams: 5}\nx: *d\ny: [*d, *d]\n"
        // root 1, d 1 + 5, x 1 + 5, y 1 + sequence 1 + 10
        #expect(ConfigFile.expandedValueCount(text, limit: 1000) == 25)
        // A scalar anchor counts one per use; an alias to an anchor not yet (or never) defined counts one.
        #expect(ConfigFile.expandedValueCount("a: &s 3\nb: *s\nc: *nowhere\n", limit: 100) == 7)
    }

    @Test
    func nestedAliasesMultiplyAndStopAtTheLimit() {
        let three = (ConfigFileTests.nested(levels: 2) + [""]).joined(separator: "\n")
        // Sizes: a0 = 11, a1 = 1 + 10 × 11 = 111, a2 = 1 + 10 × 111 = 1111; plus root and keys.
        #expect(ConfigFile.expandedValueCount(three, limit: 10_000) == 1 + 3 + 11 + 111 + 1111)
        #expect(ConfigFile.expandedValueCount(three, limit: 1_000) == nil)
        // Far past Int's range: saturates instead of trapping, and is refused.
        let huge = (ConfigFileTests.nested(levels: 30) + [""]).joined(separator: "\n")
        #expect(ConfigFile.expandedValueCount(huge, limit: ConfigFile.maximumValues) == nil)
    }

    @Test
    func invalidYAMLIsLeftForTheParserToExplain() throws {
        #expect(ConfigFile.expandedValueCount("apps:\n  default: [unclosed\n", limit: 100) != nil)
        let error = try #require(throws: ConfigFileError.self) { try ConfigFile.parse("apps:\n  default: [unclosed\n", path: "broken.yaml") }
        #expect(error.description.contains("broken.yaml is not valid YAML or JSON"), "\(error)")
    }

    /// An alias as a mapping key over nine levels of ten: the YAML library would hash about 10^10
    /// values to check the keys for duplicates, and never get to Herald's own checks.
    @Test(.timeLimit(.minutes(1)))
    func anAliasUsedAsAKeyIsRefusedBeforeTheDocumentIsBuilt() throws {
        let text = (ConfigFileTests.nested(levels: 9) + ["apps:", "  default:", "    ? *a9", "    : 1", ""]).joined(separator: "\n")
        let error = try #require(throws: ConfigFileError.self) { try ConfigFile.parse(text, path: "keys.yaml") }
        #expect(error.description.contains("keys.yaml") && error.description.contains("more than 100000 values"), "\(error)")
    }

    @Test
    func mergeKeysOfARealFileStillParse() throws {
        let text = """
            apps:
              shop: &shop
                bundle_id: com.example.shop
                connections: 2
                max_streams: 500
              news:
                <<: *shop
                bundle_id: com.example.news
                connections: 4

            """
        let file = try ConfigFile.parse(text, path: "merge.yaml")
        #expect(file.apps?["shop"]?.connections == 2 && file.apps?["shop"]?.maxStreams == 500, "\(file)")
        #expect(file.apps?["news"]?.connections == 4 && file.apps?["news"]?.maxStreams == 500
                && file.apps?["news"]?.bundleID == "com.example.news", "\(file)")
        // A misspelt key brought in by a merge is named where it lands too.
        let typo = "apps:\n  base: &base {conections: 2}\n  news: {<<: [*base], bundle_id: com.example.news}\n"
        let error = try #require(throws: ConfigFileError.self) { try ConfigFile.parse(typo, path: "typo.yaml") }
        #expect(error.description.contains("unknown keys: apps.base.conections, apps.news.conections"), "\(error)")
    }
}
