import CYaml

extension ConfigFile {
    /// How many values (scalars, mappings and sequences) the YAML `text` holds once every alias
    /// is expanded, counted from the parser's events before any document is built: or nil when
    /// the count passes `limit` (it stops there), and the count so far when the text is not valid
    /// YAML (building the document then reports the error with its place).
    ///
    /// Counted before building because building is what an alias used as a mapping *key* makes
    /// expensive: the YAML library hashes each key whole to find duplicates, so `? *a9` over nine
    /// levels of ten aliases would hash about a billion values before anything else could look
    /// at the file. Each alias counts as many values as its anchor's node expands to, so merge
    /// keys (`<<: *a`) and nested aliases multiply here as they would there.
    static func expandedValueCount(_ text: String, limit: Int) -> Int? {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else { return 0 }
        defer { yaml_parser_delete(&parser) }
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBufferPointer { buffer -> Int? in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            // The expanded size of each anchor's node, and the collections still open: their
            // anchors and the count when they began.
            var sizes: [String: Int] = [:]
            var open: [(anchor: String?, start: Int)] = []
            var count = 0
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else { return count }
                defer { yaml_event_delete(&event) }
                switch event.type {
                case YAML_STREAM_END_EVENT:
                    return count
                case YAML_SCALAR_EVENT:
                    count += 1
                    if let anchor = event.data.scalar.anchor { sizes[String(cString: anchor)] = 1 }
                case YAML_SEQUENCE_START_EVENT:
                    count += 1
                    open.append((event.data.sequence_start.anchor.map { String(cString: $0) }, count - 1))
                case YAML_MAPPING_START_EVENT:
                    count += 1
                    open.append((event.data.mapping_start.anchor.map { String(cString: $0) }, count - 1))
                case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                    if let (anchor, start) = open.popLast(), let anchor { sizes[anchor] = count - start }
                case YAML_ALIAS_EVENT:
                    // An undefined alias counts one: building the document refuses it by name.
                    let size = event.data.alias.anchor.flatMap { sizes[String(cString: $0)] } ?? 1
                    count = count.addingReportingOverflow(size).overflow ? Int.max : count + size
                default:
                    break
                }
                if count > limit { return nil }
            }
        }
    }
}
