// netsweep's network on ns-3 (engine.backend=ns3): the helper program engine/backends/ns3/build.py builds
// against the `ns3` wheel on first use and engine/backends/ns3/helper.py drives over a pipe, one line per command.
//
// The Python side (netsweep's workload and system layer) describes the network, then sends
// messages and asks ns-3 to run until the time of its own next event; ns-3 stops early at the first
// message delivery, so that the system layer can react at that instant. The two clocks stay in step:
// ns-3 never runs past the time the Python side asked for.
//
// Network: nodes 0..npus-1 are hosts, the rest switches (IP routers: ns-3 has no L2 switch for
// point-to-point links). Every link is a point-to-point duplex link. A switch egress port holds
// `buffer` bytes (drop-tail) and marks CE above `ecn` bytes (ThresholdQueueDisc below); a host NIC
// never drops, as in the engine. On a ring (links between hosts) each link's port serves the host's
// own packets, unlimited, and those it forwards, under the buffer, round-robin (RingPortQueueDisc
// below, the engine's RingPort). Routing is per connection (PathRouting below): the Python side
// gives every connection the exact links its data and its ACKs cross, so ECMP choices are the
// engine's own.
//
// TCP: one persistent connection per ordered pair of hosts, all opened (handshakes done) before
// time 0 of the Python side; the client of pair (s, d) sends the data of s -> d.
//
// Protocol (stdin -> stdout; times in picoseconds, relative to time 0 of the Python side):
//   nodes <count> <hosts>
//   link <a> <b> <rate_bps> <delay_ps> <mtu> <buf_ab> <ecn_ab> <buf_ba> <ecn_ba>   (-1: none)
//   tcp <key> <value>                        (before `start`; see ApplyTcpSetting)
//   path <src> <dst> <k> <port>... <m> <port>...    data ports, then ACK ports (port = 2 link + dir)
//   start                                    -> "ready"
//   send <t> <src> <dst> <bytes> <id>        write a message at t (no reply)
//   run <t>                                  -> "deliver <t> <n> (<id> <retransmits> <timeouts> <marks>)*n"
//                                               at the first delivery before or at t, else "at <t>"
//   stats                                    -> "stats <retransmits> <timeouts> <drops> <ecn_marks>
//                                               <packets_sent> <bytes_sent> <events>"
//   quit
// Errors: one line "error <text>" on stdout, exit status 1.
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ns3;

namespace
{

const uint16_t SERVER_PORT = 9;
const uint16_t CLIENT_PORT_BASE = 1024; // the client of pair (s, d) binds port CLIENT_PORT_BASE + d

[[noreturn]] void
Fail(const std::string& text)
{
    std::printf("error %s\n", text.c_str());
    std::fflush(stdout);
    std::exit(1);
}

struct Message
{
    uint64_t id;
    uint64_t endOffset; // the stream offset its last byte ends at
    uint64_t baseRetransmits;
    uint64_t baseTimeouts;
    uint64_t baseMarks;
};

struct Connection
{
    uint32_t src;
    uint32_t dst;
    Ptr<TcpSocketBase> client;
    Ptr<Socket> server; // the accepted socket at dst
    uint64_t written{0};  // bytes the application wrote (messages)
    uint64_t pending{0};  // of those, not yet accepted by the send buffer
    uint64_t received{0}; // bytes read at the receiver
    std::deque<Message> messages;
    uint64_t retransmits{0};
    uint64_t timeouts{0};
    uint64_t marks{0};
    Time lastDataTx{Seconds(-1)};
    Time rto{Seconds(1)};
};

struct Delivery
{
    uint64_t id;
    uint64_t retransmits;
    uint64_t timeouts;
    uint64_t marks;
};

// Everything of one network; one instance per process.
struct Net
{
    uint32_t hosts{0};
    NodeContainer nodes;
    std::vector<Ipv4Address> identity;            // host -> the address its sockets use
    std::unordered_map<uint32_t, uint32_t> hostOf; // address -> host
    // port (2 link + dir) -> (node, interface index at that node)
    std::vector<std::pair<uint32_t, uint32_t>> portIf;
    std::vector<Connection> connections; // index src * hosts + dst
    std::vector<Delivery> delivered;     // deliveries of the current `run`
    uint64_t drops{0};
    uint64_t marks{0};
    uint64_t packetsSent{0};
    uint64_t bytesSent{0};
    uint32_t connected{0};
    uint32_t accepted{0};
    bool settingUp{true};
    // tcp settings the helper itself applies
    bool idleRestart{true};
    uint32_t initCwndBytes{14600};
    uint32_t headerBytes{40}; // IPv4 + TCP + options per segment: 52 with timestamps
};

Net g_net;

// The connection a TCP packet belongs to and its direction: key = 2 (src * hosts + dst) + is_ack,
// from the IPv4 addresses and the TCP ports at the front of `tcp` (false if not one of ours).
bool
ConnectionKey(Ipv4Address from, Ipv4Address to, Ptr<const Packet> tcp, uint64_t& key)
{
    uint8_t ports[4];
    if (!tcp || tcp->GetSize() < 4)
    {
        return false;
    }
    tcp->CopyData(ports, 4);
    const uint16_t dport = (uint16_t(ports[2]) << 8) | ports[3];
    auto a = g_net.hostOf.find(from.Get());
    auto b = g_net.hostOf.find(to.Get());
    if (a == g_net.hostOf.end() || b == g_net.hostOf.end())
    {
        return false;
    }
    if (dport == SERVER_PORT) // data (or handshake) from the client a to the server b
    {
        key = 2 * (uint64_t(a->second) * g_net.hosts + b->second);
    }
    else // an ACK of connection b -> a
    {
        key = 2 * (uint64_t(b->second) * g_net.hosts + a->second) + 1;
    }
    return true;
}

// Routes each packet by its connection and direction along the links the Python side chose.
class PathRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("netsweep::PathRouting")
                                .SetParent<Ipv4RoutingProtocol>()
                                .AddConstructor<PathRouting>();
        return tid;
    }

    uint32_t m_node{0};
    std::unordered_map<uint64_t, uint32_t> m_interfaceOf; // connection key -> output interface

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p,
                               const Ipv4Header& header,
                               Ptr<NetDevice> oif,
                               Socket::SocketErrno& sockerr) override
    {
        Ipv4Address source = header.GetSource();
        if (source == Ipv4Address::GetAny() || source == Ipv4Address())
        {
            source = g_net.identity.at(m_node);
        }
        uint32_t interface = 1; // without a packet (socket set-up): any interface will do
        uint64_t key;
        if (p && ConnectionKey(source, header.GetDestination(), p, key))
        {
            auto found = m_interfaceOf.find(key);
            if (found == m_interfaceOf.end())
            {
                sockerr = Socket::ERROR_NOROUTETOHOST;
                return nullptr;
            }
            interface = found->second;
        }
        sockerr = Socket::ERROR_NOTERROR;
        return MakeRoute(source, header.GetDestination(), interface);
    }

    bool RouteInput(Ptr<const Packet> p,
                    const Ipv4Header& header,
                    Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        auto host = g_net.hostOf.find(header.GetDestination().Get());
        if (host != g_net.hostOf.end() && host->second == m_node)
        {
            lcb(p, header, m_ipv4->GetInterfaceForDevice(idev));
            return true;
        }
        uint64_t key;
        if (!ConnectionKey(header.GetSource(), header.GetDestination(), p, key))
        {
            return false;
        }
        auto found = m_interfaceOf.find(key);
        if (found == m_interfaceOf.end())
        {
            Fail("no route at node " + std::to_string(m_node) + " for connection key " +
                 std::to_string(key));
        }
        ucb(MakeRoute(header.GetSource(), header.GetDestination(), found->second), p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override
    {
    }

  private:
    Ptr<Ipv4Route> MakeRoute(Ipv4Address source, Ipv4Address destination, uint32_t interface)
    {
        Ptr<Ipv4Route> route = Create<Ipv4Route>();
        route->SetSource(source);
        route->SetDestination(destination);
        route->SetGateway(Ipv4Address("0.0.0.0")); // point-to-point: no next-hop address needed
        route->SetOutputDevice(m_ipv4->GetNetDevice(interface));
        return route;
    }

    Ptr<Ipv4> m_ipv4;
};

NS_OBJECT_ENSURE_REGISTERED(PathRouting);

class PathRoutingHelper : public Ipv4RoutingHelper
{
  public:
    PathRoutingHelper* Copy() const override
    {
        return new PathRoutingHelper(*this);
    }

    Ptr<Ipv4RoutingProtocol> Create(Ptr<Node> node) const override
    {
        Ptr<PathRouting> routing = CreateObject<PathRouting>();
        routing->m_node = node->GetId();
        return routing;
    }
};

// The drop-tail and ECN rules of a buffered egress port, as the engine's Link.admit: drop an
// arrival when the bytes waiting ahead of it exceed `buffer`, CE-mark an ECN-capable one when they
// exceed `ecn` (-1: no limit). (RED with equal thresholds would also drop packets that are not
// ECN-capable, ACKs among them, above the marking threshold; the engine never does.)
class BufferedPortQueueDisc : public QueueDisc
{
  public:
    int64_t m_buffer{-1};
    int64_t m_ecn{-1};

  protected:
    BufferedPortQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
    }

    // False (a drop, counted) if `item` may not join `backlog` bytes; else marks it if it must.
    bool Admit(Ptr<QueueDiscItem> item, int64_t backlog)
    {
        if (m_buffer >= 0 && backlog > m_buffer)
        {
            ++g_net.drops;
            DropBeforeEnqueue(item, "buffer full");
            return false;
        }
        if (m_ecn >= 0 && backlog > m_ecn && Mark(item, "above the ECN threshold"))
        {
            ++g_net.marks;
            Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
            uint64_t key;
            if (ip && ConnectionKey(ip->GetHeader().GetSource(),
                                    ip->GetHeader().GetDestination(),
                                    ip->GetPacket(),
                                    key) &&
                key % 2 == 0)
            {
                ++g_net.connections[key / 2].marks;
            }
        }
        return true;
    }

    // Internal queues that never limit: the port's rules decide what enters them.
    void AddUnlimitedQueues(std::size_t count)
    {
        while (GetNInternalQueues() < count)
        {
            AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                "MaxSize",
                QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, 1u << 30))));
        }
    }

    void InitializeParams() override
    {
    }
};

// A switch egress port as the engine models it: FIFO, with the backlog counted as the bytes here
// and in the device's one-packet queue.
class ThresholdQueueDisc : public BufferedPortQueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("netsweep::ThresholdQueueDisc")
                                .SetParent<QueueDisc>()
                                .AddConstructor<ThresholdQueueDisc>();
        return tid;
    }

    Ptr<Queue<Packet>> m_deviceQueue;

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        const int64_t backlog =
            int64_t(GetInternalQueue(0)->GetNBytes()) + int64_t(m_deviceQueue->GetNBytes());
        return Admit(item, backlog) && GetInternalQueue(0)->Enqueue(item);
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        return GetInternalQueue(0)->Dequeue();
    }

    bool CheckConfig() override
    {
        AddUnlimitedQueues(1);
        return m_deviceQueue != nullptr;
    }
};

NS_OBJECT_ENSURE_REGISTERED(ThresholdQueueDisc);

// A ring NPU's egress port as the engine's RingPort: two inputs served round-robin, packet by
// packet, when both have one waiting: the NPU's own packets (IPv4 source = this node: data and
// ACKs alike) in an unlimited queue, and the packets it forwards under the buffer and ECN rules,
// with the backlog counted as the forwarded bytes waiting plus the unsent part of the packet on the
// link. The port hands the device a packet only when the link is idle (it keeps its own clock of
// the device's transmissions, PPP header included, and runs itself again when the link frees), so
// the choice between the inputs is made at the last moment, as in the engine, and the device's
// queue stays empty. A packet that finds the link idle and nothing waiting goes straight on and
// takes no turn; the turn carries over idle periods.
class RingPortQueueDisc : public BufferedPortQueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("netsweep::RingPortQueueDisc")
                                .SetParent<QueueDisc>()
                                .AddConstructor<RingPortQueueDisc>();
        return tid;
    }

    uint32_t m_node{0};
    DataRate m_rate;

  private:
    static const std::size_t OWN = 0;
    static const std::size_t FORWARDED = 1;

    Time m_busyUntil{0}; // when the device ends sending the last packet handed to it
    bool m_ownTurn{true}; // whose packet goes next when both inputs have one waiting
    int m_straight{-1};   // the input holding a packet that found the port idle (-1: none)
    EventId m_wake;       // Run when the link frees, while packets wait

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        auto source = ip ? g_net.hostOf.find(ip->GetHeader().GetSource().Get()) : g_net.hostOf.end();
        const bool own = source != g_net.hostOf.end() && source->second == m_node;
        const std::size_t input = own ? OWN : FORWARDED;
        const Time now = Simulator::Now();
        const bool idle = m_busyUntil <= now;
        if (idle && GetInternalQueue(OWN)->IsEmpty() && GetInternalQueue(FORWARDED)->IsEmpty())
        {
            m_straight = int(input); // dequeued at once by the Run that follows every enqueue
        }
        else if (!own)
        {
            // the unsent part of the packet on the link, in whole bytes (ps x bit/s / 8e12)
            const int64_t unsent =
                idle ? 0
                     : (m_busyUntil - now).GetPicoSeconds() * int64_t(m_rate.GetBitRate()) /
                           8'000'000'000'000;
            if (!Admit(item, int64_t(GetInternalQueue(FORWARDED)->GetNBytes()) + unsent))
            {
                return false;
            }
        }
        return GetInternalQueue(input)->Enqueue(item);
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        Ptr<InternalQueue> own = GetInternalQueue(OWN);
        Ptr<InternalQueue> forwarded = GetInternalQueue(FORWARDED);
        if (own->IsEmpty() && forwarded->IsEmpty())
        {
            return nullptr;
        }
        const Time now = Simulator::Now();
        if (m_busyUntil > now)
        {
            if (!m_wake.IsPending())
            {
                m_wake = Simulator::Schedule(m_busyUntil - now, &QueueDisc::Run, this);
            }
            return nullptr;
        }
        Ptr<QueueDiscItem> item;
        if (m_straight >= 0)
        {
            item = GetInternalQueue(m_straight)->Dequeue();
            m_straight = -1;
        }
        else if (!own->IsEmpty() && (m_ownTurn || forwarded->IsEmpty()))
        {
            item = own->Dequeue();
            m_ownTurn = false;
        }
        else
        {
            item = forwarded->Dequeue();
            m_ownTurn = true;
        }
        m_busyUntil = now + m_rate.CalculateBytesTxTime(item->GetSize() + PppHeader().GetSerializedSize());
        return item;
    }

    bool CheckConfig() override
    {
        AddUnlimitedQueues(2);
        return m_rate.GetBitRate() > 0;
    }
};

NS_OBJECT_ENSURE_REGISTERED(RingPortQueueDisc);

// Restart after idle (RFC 5681 section 4.1, as the engine does it): when a connection starts
// sending with nothing in flight after more than one RTO without sending, cwnd = min(cwnd, IW).
// ns-3 has no such rule; its congestion-control hook for "sending resumes" carries it here.
template <class Base>
class IdleRestart : public Base
{
  public:
    Connection* m_connection{nullptr};

    void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override
    {
        if (event == TcpSocketState::CA_EVENT_TX_START && g_net.idleRestart && m_connection &&
            m_connection->lastDataTx >= Time(0) &&
            Simulator::Now() - m_connection->lastDataTx > m_connection->rto &&
            tcb->m_cWnd > g_net.initCwndBytes)
        {
            tcb->m_cWnd = g_net.initCwndBytes;
            tcb->m_cWndInfl = g_net.initCwndBytes;
        }
        Base::CwndEvent(tcb, event);
    }

    Ptr<TcpCongestionOps> Fork() override
    {
        return CopyObject<IdleRestart<Base>>(this);
    }
};

// CUBIC growing its window on every ACK of new data, as the engine's CUBIC and NewReno and ns-3's
// NewReno do. ns-3's TcpCubic::IncreaseWindow alone returns without growth unless the last segment
// sent filled cwnd (TcpSocketBase::SendDataPacket's m_isCwndLimited): the ACKs of a message's last
// window, sent with nothing more to send, grow nothing, so each step of a collective starts the next
// message from a smaller window than NewReno's. Linux's tcp_is_cwnd_limited grows in slow start
// while cwnd < 2 x the most segments in flight in the last window, which those ACKs all meet.
class GrowingCubic : public IdleRestart<TcpCubic>
{
  public:
    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override
    {
        tcb->m_isCwndLimited = true;
        IdleRestart<TcpCubic>::IncreaseWindow(tcb, segmentsAcked);
    }

    Ptr<TcpCongestionOps> Fork() override
    {
        return CopyObject<GrowingCubic>(this);
    }
};

// DCTCP with its window floored at two segments, as Linux's dctcp_ssthresh and the engine's.
// ns-3's TcpDctcp::GetSsThresh returns (1 - alpha / 2) cwnd with no floor, so a flow whose
// windows keep being marked (alpha near 1) halves its window each round trip below one segment;
// once everything it sent is acknowledged, TcpSocketBase::SendPendingData's silly-window check
// (less than a segment of window, more than that waiting) sends nothing, and only the
// retransmission timer (200 ms, a timeout without a retransmission) gets it going again. A floor
// of one segment (RFC 3168 section 6.1.2's bound) ends the stall but, with many flows behind one
// marking port, leaves each at one segment where Linux keeps two (half the throughput per flow
// when the port's queue never drops below the threshold).
class FlooredDctcp : public IdleRestart<TcpDctcp>
{
  public:
    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override
    {
        return std::max(IdleRestart<TcpDctcp>::GetSsThresh(tcb, bytesInFlight), 2 * tcb->m_segmentSize);
    }

    Ptr<TcpCongestionOps> Fork() override
    {
        return CopyObject<FlooredDctcp>(this);
    }
};

// --- a debug trace of one connection (NETSWEEP_NS3_TRACE=src,dst), on stderr ------------------
// ack <t_ps> <ack> <ece>; cwnd <t_ps> <bytes>; alpha <t_ps> <marked bytes> <acked bytes> <alpha>

bool
IsTraced(const Connection* c)
{
    static const char* pair = std::getenv("NETSWEEP_NS3_TRACE");
    if (!pair)
    {
        return false;
    }
    unsigned src = 0;
    unsigned dst = 0;
    return std::sscanf(pair, "%u,%u", &src, &dst) == 2 && c->src == src && c->dst == dst;
}

void
TraceAck(Connection* c, Ptr<const Packet>, const TcpHeader& header, Ptr<const TcpSocketBase>)
{
    std::fprintf(stderr, "ack %lld %u %d\n", (long long)Simulator::Now().GetPicoSeconds(),
                 header.GetAckNumber().GetValue(), (header.GetFlags() & TcpHeader::ECE) ? 1 : 0);
}

void
TraceCwnd(uint32_t, uint32_t now)
{
    std::fprintf(stderr, "cwnd %lld %u\n", (long long)Simulator::Now().GetPicoSeconds(), now);
}

void
TraceAlpha(uint32_t marked, uint32_t acked, double alpha)
{
    std::fprintf(stderr, "alpha %lld %u %u %.6f\n", (long long)Simulator::Now().GetPicoSeconds(), marked,
                 acked, alpha);
}

std::string g_cc = "newreno";

Ptr<TcpCongestionOps>
MakeCongestionControl(Connection* connection)
{
    if (g_cc == "newreno")
    {
        Ptr<IdleRestart<TcpNewReno>> cc = CreateObject<IdleRestart<TcpNewReno>>();
        cc->m_connection = connection;
        return cc;
    }
    if (g_cc == "cubic")
    {
        Ptr<GrowingCubic> cc = CreateObject<GrowingCubic>();
        cc->m_connection = connection;
        return cc;
    }
    Ptr<FlooredDctcp> cc = CreateObject<FlooredDctcp>();
    cc->m_connection = connection;
    if (IsTraced(connection))
    {
        cc->TraceConnectWithoutContext("CongestionEstimate", MakeCallback(&TraceAlpha));
    }
    return cc;
}

// `tcp <key> <value>` lines: the engine's tcp.* settings in ns-3's attributes.
void
ApplyTcpSetting(const std::string& key, const std::string& value)
{
    if (key == "cc")
    {
        g_cc = value;
        TypeId type = value == "newreno" ? TcpNewReno::GetTypeId()
                      : value == "cubic" ? TcpCubic::GetTypeId()
                      : value == "dctcp" ? TcpDctcp::GetTypeId()
                                         : (Fail("unknown cc " + value), TypeId());
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(type));
    }
    else if (key == "mss_bytes")
    {
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(std::stoul(value)));
    }
    else if (key == "timestamps")
    {
        Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(value == "1"));
    }
    else if (key == "header_bytes")
    {
        g_net.headerBytes = std::stoul(value);
    }
    else if (key == "init_cwnd_pkts")
    {
        Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(std::stoul(value)));
    }
    else if (key == "init_cwnd_bytes")
    {
        g_net.initCwndBytes = std::stoul(value);
    }
    else if (key == "min_rto_ps")
    {
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(PicoSeconds(std::stoll(value))));
    }
    else if (key == "clock_granularity_ps")
    {
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity",
                           TimeValue(PicoSeconds(std::stoll(value))));
    }
    else if (key == "sack")
    {
        Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(value == "1"));
    }
    else if (key == "delayed_ack")
    {
        Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(value == "1" ? 2 : 1));
    }
    else if (key == "delayed_ack_timeout_ps")
    {
        Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(PicoSeconds(std::stoll(value))));
    }
    else if (key == "rcv_buf_bytes")
    {
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(std::stoul(value)));
    }
    else if (key == "ecn")
    {
        Config::SetDefault("ns3::TcpSocketBase::UseEcn",
                           EnumValue(value == "1" ? TcpSocketState::On : TcpSocketState::Off));
    }
    else if (key == "slow_start_after_idle")
    {
        g_net.idleRestart = value == "1";
    }
    else if (key == "dctcp_g")
    {
        Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(std::stod(value)));
    }
    else if (key == "cubic_c")
    {
        Config::SetDefault("ns3::TcpCubic::C", DoubleValue(std::stod(value)));
    }
    else if (key == "cubic_beta")
    {
        Config::SetDefault("ns3::TcpCubic::Beta", DoubleValue(std::stod(value)));
    }
    else
    {
        Fail("unknown tcp setting " + key);
    }
}

// --- the application side: writing messages, reading them, deliveries -----------------------

void
WritePending(Connection* c)
{
    while (c->pending > 0)
    {
        const uint64_t n = std::min<uint64_t>(c->pending, c->client->GetTxAvailable());
        if (n == 0)
        {
            return; // the rest goes from SendSpace when the send buffer drains
        }
        const int sent = c->client->Send(Create<Packet>(uint32_t(n)), 0);
        if (sent <= 0)
        {
            return;
        }
        c->pending -= uint64_t(sent);
    }
}

void
SendSpace(Connection* c, Ptr<Socket>, uint32_t)
{
    WritePending(c);
}

void
Readable(Connection* c, Ptr<Socket> s)
{
    Ptr<Packet> p;
    while ((p = s->Recv()) && p->GetSize() > 0)
    {
        c->received += p->GetSize();
    }
    while (!c->messages.empty() && c->messages.front().endOffset <= c->received)
    {
        const Message& m = c->messages.front();
        g_net.delivered.push_back({m.id,
                                   c->retransmits - m.baseRetransmits,
                                   c->timeouts - m.baseTimeouts,
                                   c->marks - m.baseMarks});
        c->messages.pop_front();
        Simulator::Stop(); // after this event: the Python side reacts at this instant
    }
}

// --- traces -------------------------------------------------------------------------------

void
DataTx(Connection* c, Ptr<const Packet> p, const TcpHeader&, Ptr<const TcpSocketBase>)
{
    if (p->GetSize() > 0)
    {
        ++g_net.packetsSent;
        g_net.bytesSent += p->GetSize() + g_net.headerBytes; // + IPv4, TCP and options, as the engine counts
        c->lastDataTx = Simulator::Now();
    }
}

void
Retransmitted(Connection* c,
              Ptr<const Packet>,
              const TcpHeader&,
              const Address&,
              const Address&,
              Ptr<const TcpSocketBase>)
{
    ++c->retransmits;
}

// ns-3 doubles the RTO (up to 60 s) only in ReTxTimeout; otherwise it sets it from the RTT
// estimate, which cannot double between two samples here.
void
RtoChanged(Connection* c, Time before, Time now)
{
    c->rto = now;
    if (!g_net.settingUp && now > before && (now == before + before || now == Seconds(60)))
    {
        ++c->timeouts;
    }
}

// A device queue dropping a frame (the queue disc in front of a switch port should never let it)
void
DeviceDrop(Ptr<const Packet>)
{
    ++g_net.drops;
}

// --- set-up -------------------------------------------------------------------------------

void
Connected(Ptr<Socket>)
{
    ++g_net.connected;
}

void
ConnectFailed(Ptr<Socket>)
{
    Fail("a TCP connection failed to open");
}

void
Accepted(uint32_t node, Ptr<Socket> s, const Address& from)
{
    const InetSocketAddress peer = InetSocketAddress::ConvertFrom(from);
    auto src = g_net.hostOf.find(peer.GetIpv4().Get());
    if (src == g_net.hostOf.end())
    {
        Fail("a connection from an unknown address");
    }
    Connection* c = &g_net.connections[uint64_t(src->second) * g_net.hosts + node];
    c->server = s;
    s->SetRecvCallback(MakeBoundCallback(&Readable, c));
    ++g_net.accepted;
}

void
ConnectClient(Connection* c)
{
    c->client->Connect(InetSocketAddress(g_net.identity[c->dst], SERVER_PORT));
}

void
CheckEstablished(uint32_t expected)
{
    if (g_net.connected == expected && g_net.accepted == expected)
    {
        Simulator::Stop();
        return;
    }
    Simulator::Schedule(MicroSeconds(1), &CheckEstablished, expected);
}

// Run ns-3 until `until` (absolute) or the first delivery; false if a delivery stopped it.
bool
RunUntil(Time until)
{
    if (until < Simulator::Now())
    {
        Fail("asked to run back in time");
    }
    EventId stop = Simulator::Stop(until - Simulator::Now());
    Simulator::Run();
    Simulator::Cancel(stop);
    return g_net.delivered.empty();
}

} // namespace

int
main()
{
    Time::SetResolution(Time::PS); // the engine's unit: serialisation times are exact
    std::ios::sync_with_stdio(false);
    // the engine's TCP: no timestamps (40-byte headers) unless `tcp timestamps 1` says so, RFC 6675
    // recovery, limited transmit, never give up on a segment; window scaling so that windows can
    // pass 64 KiB
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::LimitedTransmit", BooleanValue(true));
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(TcpClassicRecovery::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(1000));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1u << 30));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1u << 30));
    Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(false)); // the engine's CUBIC has none
    Config::SetDefault("ns3::TcpDctcp::DctcpAlphaOnInit", DoubleValue(1.0));

    Time t0; // ns-3's time at the Python side's time 0
    uint32_t nextAddress = Ipv4Address("10.0.0.1").Get();
    std::string command;
    while (std::cin >> command)
    {
        if (command == "nodes")
        {
            uint32_t count;
            std::cin >> count >> g_net.hosts;
            g_net.nodes.Create(count);
            InternetStackHelper stack;
            PathRoutingHelper routing;
            stack.SetRoutingHelper(routing);
            stack.Install(g_net.nodes);
            g_net.identity.resize(g_net.hosts);
            g_net.connections.resize(uint64_t(g_net.hosts) * g_net.hosts);
        }
        else if (command == "link")
        {
            uint32_t a;
            uint32_t b;
            uint64_t rateBps;
            int64_t delayPs;
            uint32_t mtu;
            int64_t buffer[2];
            int64_t ecn[2];
            std::cin >> a >> b >> rateBps >> delayPs >> mtu >> buffer[0] >> ecn[0] >> buffer[1] >>
                ecn[1];
            PointToPointHelper p2p;
            p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rateBps)));
            p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
            p2p.SetChannelAttribute("Delay", TimeValue(PicoSeconds(delayPs)));
            p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1000000p"));
            NetDeviceContainer pair = p2p.Install(g_net.nodes.Get(a), g_net.nodes.Get(b));
            const uint32_t ends[2] = {a, b};
            for (int side = 0; side < 2; ++side)
            {
                const uint32_t node = ends[side];
                Ptr<PointToPointNetDevice> device =
                    DynamicCast<PointToPointNetDevice>(pair.Get(side));
                Ptr<Ipv4> ipv4 = g_net.nodes.Get(node)->GetObject<Ipv4>();
                const uint32_t interface = ipv4->AddInterface(device);
                const Ipv4Address address(nextAddress++);
                ipv4->AddAddress(interface, Ipv4InterfaceAddress(address, Ipv4Mask("255.0.0.0")));
                ipv4->SetUp(interface);
                if (node < g_net.hosts)
                {
                    g_net.hostOf[address.Get()] = node;
                    if (interface == 1)
                    {
                        g_net.identity[node] = address;
                    }
                }
                device->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&DeviceDrop));
                // port 2 link + side leaves `node` through this interface
                g_net.portIf.emplace_back(node, interface);
                // a link between two hosts is a ring link: the host also forwards on it
                Ptr<BufferedPortQueueDisc> qdisc;
                if (a < g_net.hosts && b < g_net.hosts)
                {
                    Ptr<RingPortQueueDisc> ring = CreateObject<RingPortQueueDisc>();
                    ring->m_node = node;
                    ring->m_rate = DataRate(rateBps);
                    qdisc = ring;
                }
                else if (buffer[side] >= 0 || ecn[side] >= 0)
                {
                    Ptr<ThresholdQueueDisc> threshold = CreateObject<ThresholdQueueDisc>();
                    threshold->m_deviceQueue = device->GetQueue();
                    qdisc = threshold;
                }
                if (qdisc)
                {
                    device->GetQueue()->SetMaxSize(QueueSize("1p"));
                    qdisc->m_buffer = buffer[side];
                    qdisc->m_ecn = ecn[side];
                    g_net.nodes.Get(node)->GetObject<TrafficControlLayer>()->SetRootQueueDiscOnDevice(
                        device,
                        qdisc);
                }
            }
        }
        else if (command == "tcp")
        {
            std::string key;
            std::string value;
            std::cin >> key >> value;
            ApplyTcpSetting(key, value);
        }
        else if (command == "path")
        {
            uint32_t src;
            uint32_t dst;
            uint32_t k;
            std::cin >> src >> dst >> k;
            std::vector<uint32_t> data(k);
            for (auto& port : data)
            {
                std::cin >> port;
            }
            std::cin >> k;
            std::vector<uint32_t> acks(k);
            for (auto& port : acks)
            {
                std::cin >> port;
            }
            const uint64_t index = uint64_t(src) * g_net.hosts + dst;
            // install at once (a path may change before the first message: ECMP by first use)
            for (int direction = 0; direction < 2; ++direction)
            {
                for (uint32_t port : direction == 0 ? data : acks)
                {
                    auto [node, interface] = g_net.portIf.at(port);
                    Ptr<PathRouting> routing = DynamicCast<PathRouting>(
                        g_net.nodes.Get(node)->GetObject<Ipv4>()->GetRoutingProtocol());
                    routing->m_interfaceOf[2 * index + direction] = interface;
                }
            }
        }
        else if (command == "start")
        {
            // a listener on every host, then one connection per ordered pair, handshakes before t0
            for (uint32_t host = 0; host < g_net.hosts; ++host)
            {
                Ptr<Socket> listener =
                    Socket::CreateSocket(g_net.nodes.Get(host), TcpSocketFactory::GetTypeId());
                listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), SERVER_PORT));
                listener->Listen();
                listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                            MakeBoundCallback(&Accepted, host));
            }
            uint32_t expected = 0;
            for (uint32_t src = 0; src < g_net.hosts; ++src)
            {
                for (uint32_t dst = 0; dst < g_net.hosts; ++dst)
                {
                    if (src == dst)
                    {
                        continue;
                    }
                    Connection* c = &g_net.connections[uint64_t(src) * g_net.hosts + dst];
                    c->src = src;
                    c->dst = dst;
                    c->client = DynamicCast<TcpSocketBase>(
                        Socket::CreateSocket(g_net.nodes.Get(src), TcpSocketFactory::GetTypeId()));
                    c->client->SetCongestionControlAlgorithm(MakeCongestionControl(c));
                    c->client->Bind(
                        InetSocketAddress(g_net.identity[src], uint16_t(CLIENT_PORT_BASE + dst)));
                    c->client->SetConnectCallback(MakeCallback(&Connected),
                                                  MakeCallback(&ConnectFailed));
                    c->client->SetSendCallback(MakeBoundCallback(&SendSpace, c));
                    c->client->TraceConnectWithoutContext("Tx", MakeBoundCallback(&DataTx, c));
                    c->client->TraceConnectWithoutContext("Retransmission",
                                                          MakeBoundCallback(&Retransmitted, c));
                    c->client->TraceConnectWithoutContext("RTO", MakeBoundCallback(&RtoChanged, c));
                    if (IsTraced(c))
                    {
                        c->client->TraceConnectWithoutContext("Rx", MakeBoundCallback(&TraceAck, c));
                        c->client->TraceConnectWithoutContext("CongestionWindow", MakeCallback(&TraceCwnd));
                    }
                    // from an event: the nodes' traffic-control layers start at their first event
                    Simulator::ScheduleWithContext(src, Time(0), &ConnectClient, c);
                    ++expected;
                }
            }
            Simulator::Schedule(MicroSeconds(1), &CheckEstablished, expected);
            Simulator::Stop(Seconds(100));
            Simulator::Run();
            if (g_net.connected != expected || g_net.accepted != expected)
            {
                Fail("the connections did not open within 100 s");
            }
            // let the handshakes' last packets leave the network, then start the clock
            RunUntil(Simulator::Now() + MilliSeconds(1));
            t0 = Simulator::Now();
            g_net.settingUp = false;
            g_net.packetsSent = 0;
            g_net.bytesSent = 0;
            std::printf("ready\n");
            std::fflush(stdout);
        }
        else if (command == "send")
        {
            int64_t t;
            uint32_t src;
            uint32_t dst;
            uint64_t bytes;
            uint64_t id;
            std::cin >> t >> src >> dst >> bytes >> id;
            const Time at = t0 + PicoSeconds(t);
            if (Simulator::Now() < at && !RunUntil(at))
            {
                Fail("a message was delivered before a send the Python side had already made");
            }
            Connection* c = &g_net.connections[uint64_t(src) * g_net.hosts + dst];
            c->written += bytes;
            c->messages.push_back({id, c->written, c->retransmits, c->timeouts, c->marks});
            c->pending += bytes;
            Simulator::ScheduleWithContext(src, Time(0), &WritePending, c);
        }
        else if (command == "run")
        {
            int64_t t;
            std::cin >> t;
            if (RunUntil(t0 + PicoSeconds(t)))
            {
                std::printf("at %lld\n", (long long)t);
            }
            else
            {
                std::ostringstream line;
                line << "deliver " << (Simulator::Now() - t0).GetPicoSeconds() << " "
                     << g_net.delivered.size();
                for (const Delivery& d : g_net.delivered)
                {
                    line << " " << d.id << " " << d.retransmits << " " << d.timeouts << " "
                         << d.marks;
                }
                g_net.delivered.clear();
                std::printf("%s\n", line.str().c_str());
            }
            std::fflush(stdout);
        }
        else if (command == "stats")
        {
            uint64_t retransmits = 0;
            uint64_t timeouts = 0;
            for (const Connection& c : g_net.connections)
            {
                retransmits += c.retransmits;
                timeouts += c.timeouts;
            }
            std::printf("stats %llu %llu %llu %llu %llu %llu %llu\n",
                        (unsigned long long)retransmits,
                        (unsigned long long)timeouts,
                        (unsigned long long)g_net.drops,
                        (unsigned long long)g_net.marks,
                        (unsigned long long)g_net.packetsSent,
                        (unsigned long long)g_net.bytesSent,
                        (unsigned long long)Simulator::GetEventCount());
            std::fflush(stdout);
        }
        else if (command == "quit")
        {
            break;
        }
        else
        {
            Fail("unknown command " + command);
        }
    }
    Simulator::Destroy();
    return 0;
}
