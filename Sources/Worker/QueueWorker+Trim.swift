import Queue
import Transport

/// Trimming each queue's job stream below what every consumer finished (`StreamTrim`), instead of
/// an `XDEL` of every entry in its outcome batch.
///
/// A confirmed outcome batch arms one trim `trimIntervalMilliseconds` later, so a busy queue is
/// trimmed about ten times a second (one script call, whatever the rate) and an idle one not at
/// all; the last batch before a quiet spell is trimmed within that interval, and a draining
/// worker trims before it stops. A trim that fails (connection lost, a refusal) is only logged:
/// the next confirmed batch arms another, and the entries it would have removed are finished
/// entries, never work.
extension QueueWorker {
    /// How long after a confirmed outcome batch its queue's stream is trimmed.
    static let trimIntervalMilliseconds = 100

    /// Arms `channel`'s trim unless one is armed. Armed even while a trim is in flight: that one
    /// may have run before the batch just confirmed, and an idle queue gets no other chance.
    func scheduleTrim(_ channel: QueueChannel) {
        guard channel.trimTimer == nil else { return }
        channel.trimTimer = loop.schedule(afterMilliseconds: Int64(QueueWorker.trimIntervalMilliseconds)) { [weak self, weak channel] in
            guard let self, let channel else { return }
            channel.trimTimer = nil
            self.trim(channel, then: nil)
        }
    }

    /// Sends the trim script on `channel`'s writer; `then` runs once it is answered (or at once when
    /// the queue is not connected).
    func trim(_ channel: QueueChannel, then: (() -> Void)?) {
        guard channel.groupReady, let writer = channel.writer, writer.isReady else { then?(); return }
        channel.trimsInFlight += 1
        writer.send(StreamTrim.command(stream: channel.keys.jobs)) { [weak self, weak channel] result in
            guard let self, let channel else { then?(); return }
            channel.trimsInFlight -= 1
            switch result {
            case .success(.error(let message)):
                self.handleRedisError(message, channel: channel)
            default:
                break  // connection lost: the next confirmed batch arms another trim
            }
            then?()
            if self.phase == .draining { self.checkDrained() }
        }
    }

    /// Trims every queue with a trim armed now, then calls `done` once all answered (draining:
    /// a stopped worker leaves no finished entry it could have removed). Called again while
    /// those trims are answered, it does nothing.
    func trimNow(_ done: @escaping () -> Void) {
        let armed = channels.filter { $0.trimTimer != nil }
        guard !armed.isEmpty else {
            if !channels.contains(where: { $0.trimsInFlight > 0 }) { done() }
            return
        }
        var remaining = armed.count
        for channel in armed {
            if let timer = channel.trimTimer { loop.cancel(timer) }
            channel.trimTimer = nil
            trim(channel) {
                remaining -= 1
                if remaining == 0 { done() }
            }
        }
    }
}
