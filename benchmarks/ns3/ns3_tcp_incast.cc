// ns-3.44 (PyPI wheel): the incast scenario of netsweep's benchmarks/bench_engine.py, for timing
// ns-3 on the same packets as our engine.
//
// N sender hosts and 1 receiver host, each on its own point-to-point link (10 Gb/s, 5 us) to one
// central node that forwards IP (ns-3 has no L2 switch for point-to-point links, so the "switch" is
// a router with global routing). Each sender keeps one TCP connection to the receiver for the
// whole run; in each of --rounds barrier-synchronised rounds every sender writes --bytes into it,
// and the next round starts (at the same instant) when the receiver has read all N x --bytes of the
// current one. Round 1 starts once every connection is established (the handshakes are not part of
// the engine's scenario, which has none); sim_time_s is measured from there.
//
// TCP: NewReno with SACK and RFC 6675-style loss recovery (TcpClassicRecovery: cwnd = ssthresh,
// sending limited by the SACK "pipe"; ns-3's default would be PRR), MSS 1460 with the timestamp
// option off so that a full segment is a 1500-byte IP packet (20 B IPv4 + 20 B TCP header, like
// the engine's 40 bytes), initial cwnd 10, DelAckCount 1 (an ACK for every segment), minimum RTO
// --minRto ms, clock granularity 1 us (the engine's), limited transmit on (RFC 3042, as in the engine).
//
// Usage: ns3_tcp_incast [--rounds=10] [--senders=16] [--bytes=65536] [--minRto=200]
//                       [--buffer=65536] [--rate=10Gbps] [--delay=5us] [--prr=0] [--verbose=0]
// Prints one RESULT line; packets per second are computed from tx_data_pkts.
#include "ppp_tcp_frame.h"

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <chrono>
#include <cstdio>
#include <vector>

using namespace ns3;
using netsweep_bench::TcpSegmentOf;

namespace
{

class Incast
{
  public:
    Incast(uint32_t senders, uint32_t rounds, uint64_t bytes)
        : m_senders(senders),
          m_rounds(rounds),
          m_bytes(bytes),
          m_pending(senders, 0),
          m_highestSent(senders, 0),
          m_started(senders, false)
    {
    }

    // --- setup ---------------------------------------------------------------------------
    void Listen(Ptr<Node> receiver, uint16_t port)
    {
        Ptr<Socket> listener = Socket::CreateSocket(receiver, TcpSocketFactory::GetTypeId());
        listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        listener->Listen();
        listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&Incast::Accepted, this));
        m_listener = listener;
    }

    void Connect(Ptr<Node> sender, Ipv4Address dst, uint16_t port)
    {
        Ptr<Socket> s = Socket::CreateSocket(sender, TcpSocketFactory::GetTypeId());
        s->Bind();
        s->SetConnectCallback(MakeCallback(&Incast::Connected, this),
                              MakeCallback(&Incast::ConnectFailed, this));
        s->SetSendCallback(MakeCallback(&Incast::SendSpace, this));
        s->TraceConnectWithoutContext("RTO", MakeCallback(&Incast::RtoChanged, this));
        s->TraceConnectWithoutContext("CongState", MakeCallback(&Incast::CongStateChanged, this));
        m_sockets.push_back(s);
        s->Connect(InetSocketAddress(dst, port));
    }

    // --- trace sinks -----------------------------------------------------------------------
    // Frames a sender's device starts transmitting: data segments, and among them retransmissions
    // (a segment starting below the highest sequence that sender has sent).
    void SenderTx(uint32_t i, Ptr<const Packet> frame)
    {
        uint32_t seq;
        uint32_t payload;
        if (TcpSegmentOf(frame, seq, payload) && payload > 0)
        {
            ++m_txDataPkts;
            const uint32_t end = seq + payload;
            if (!m_started[i])
            {
                m_started[i] = true;
                m_highestSent[i] = end;
            }
            else if (int32_t(end - m_highestSent[i]) > 0)
            {
                if (int32_t(seq - m_highestSent[i]) < 0)
                {
                    ++m_retransmits;
                }
                m_highestSent[i] = end;
            }
            else
            {
                ++m_retransmits;
            }
        }
    }

    // Frames the receiver's device receives: data segments only (not the handshake).
    void ReceiverRx(Ptr<const Packet> frame)
    {
        uint32_t seq;
        uint32_t payload;
        if (TcpSegmentOf(frame, seq, payload) && payload > 0)
        {
            ++m_rxDataPkts;
        }
    }

    // ns-3 doubles the RTO in ReTxTimeout and otherwise sets it from the RTT estimate (at least
    // MinRto), so a doubling is a timeout (the estimate itself cannot double here).
    void RtoChanged(Time oldRto, Time newRto)
    {
        if (m_roundsStarted > 0 && newRto > oldRto &&
            (newRto == oldRto + oldRto || newRto == Seconds(60)))
        {
            ++m_timeouts;
        }
    }

    void CongStateChanged(TcpSocketState::TcpCongState_t before, TcpSocketState::TcpCongState_t now)
    {
        if (now == TcpSocketState::CA_RECOVERY)
        {
            ++m_fastRecoveries;
        }
        else if (now == TcpSocketState::CA_LOSS && before < 5)
        {
            ++m_lossFrom[before]; // the state a timeout interrupted (for --verbose)
        }
    }

    void TcDrop(Ptr<const Packet>)
    {
        ++m_drops;
    }

    void QueueDrop(Ptr<const Packet>)
    {
        ++m_drops;
    }

    void BottleneckBytes(uint32_t, uint32_t now)
    {
        m_maxQueueBytes = std::max(m_maxQueueBytes, now);
    }

    void BottleneckPackets(uint32_t, uint32_t now)
    {
        m_maxQueuePackets = std::max(m_maxQueuePackets, now);
    }

    // --- connection management ---------------------------------------------------------------
    void Accepted(Ptr<Socket> s, const Address&)
    {
        s->SetRecvCallback(MakeCallback(&Incast::Readable, this));
        m_accepted.push_back(s);
        MaybeStart();
    }

    void Connected(Ptr<Socket>)
    {
        ++m_connected;
        MaybeStart();
    }

    void ConnectFailed(Ptr<Socket>)
    {
        NS_FATAL_ERROR("a sender failed to connect");
    }

    void MaybeStart()
    {
        if (m_roundsStarted == 0 && m_connected == m_senders && m_accepted.size() == m_senders)
        {
            m_firstRoundStart = Simulator::Now();
            StartRound();
        }
    }

    // --- the rounds ----------------------------------------------------------------------
    void StartRound()
    {
        ++m_roundsStarted;
        m_roundRx = 0;
        m_roundStart = Simulator::Now();
        for (uint32_t i = 0; i < m_senders; ++i)
        {
            // each sender writes from its own node's context, at this same instant
            Simulator::ScheduleWithContext(m_sockets[i]->GetNode()->GetId(),
                                           Time(0),
                                           &Incast::Write,
                                           this,
                                           i,
                                           m_bytes);
        }
    }

    void Write(uint32_t i, uint64_t more)
    {
        m_pending[i] += more;
        Ptr<Socket> s = m_sockets[i];
        while (m_pending[i] > 0)
        {
            uint64_t n = std::min<uint64_t>(m_pending[i], s->GetTxAvailable());
            if (n == 0)
            {
                return; // the rest goes from SendSpace when the send buffer drains
            }
            int sent = s->Send(Create<Packet>(uint32_t(n)));
            if (sent <= 0)
            {
                return;
            }
            m_pending[i] -= uint64_t(sent);
        }
    }

    void SendSpace(Ptr<Socket> s, uint32_t)
    {
        for (uint32_t i = 0; i < m_senders; ++i)
        {
            if (m_sockets[i] == s && m_pending[i] > 0)
            {
                Write(i, 0);
            }
        }
    }

    void Readable(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()) && p->GetSize() > 0)
        {
            m_roundRx += p->GetSize();
            m_bytesRx += p->GetSize();
        }
        if (m_roundRx == uint64_t(m_senders) * m_bytes)
        {
            if (m_verbose)
            {
                std::fprintf(stderr,
                             "round %u: %.6f s -> %.6f s (%.3f ms) tx_data_pkts=%llu drops=%llu "
                             "timeouts=%llu fast_recoveries=%llu\n",
                             m_roundsStarted,
                             m_roundStart.GetSeconds(),
                             Simulator::Now().GetSeconds(),
                             (Simulator::Now() - m_roundStart).GetSeconds() * 1e3,
                             (unsigned long long)m_txDataPkts,
                             (unsigned long long)m_drops,
                             (unsigned long long)m_timeouts,
                             (unsigned long long)m_fastRecoveries);
            }
            m_lastRoundEnd = Simulator::Now();
            if (m_roundsStarted < m_rounds)
            {
                StartRound();
            }
            else
            {
                m_finished = true;
                Simulator::Stop(); // like the engine: stale timers and the last ACKs need not run
            }
        }
    }

    uint32_t m_senders;
    uint32_t m_rounds;
    uint64_t m_bytes;
    std::vector<Ptr<Socket>> m_sockets;
    std::vector<Ptr<Socket>> m_accepted;
    Ptr<Socket> m_listener;
    std::vector<uint64_t> m_pending;
    std::vector<uint32_t> m_highestSent;
    std::vector<bool> m_started;
    uint32_t m_connected{0};
    uint32_t m_roundsStarted{0};
    uint64_t m_roundRx{0};
    uint64_t m_bytesRx{0};
    bool m_finished{false};
    bool m_verbose{false};
    Time m_roundStart;
    Time m_firstRoundStart;
    Time m_lastRoundEnd;
    uint64_t m_txDataPkts{0};
    uint64_t m_rxDataPkts{0};
    uint64_t m_retransmits{0};
    uint64_t m_timeouts{0};
    uint64_t m_fastRecoveries{0};
    uint64_t m_lossFrom[5]{};
    uint32_t m_maxQueueBytes{0};   // --verbose: largest backlog waiting toward the receiver
    uint32_t m_maxQueuePackets{0};
    uint64_t m_drops{0}; // router egress: queue drops and traffic-control drops
};

} // namespace

int
main(int argc, char* argv[])
{
    auto t0 = std::chrono::steady_clock::now();
    uint32_t rounds = 10;
    uint32_t senders = 16;
    uint64_t bytes = 65536;
    double minRtoMs = 200;
    uint32_t buffer = 65536;
    std::string rate = "10Gbps";
    std::string delay = "5us";
    bool prr = false;
    bool verbose = false;
    CommandLine cmd;
    cmd.AddValue("rounds", "barrier-synchronised rounds", rounds);
    cmd.AddValue("senders", "sender hosts", senders);
    cmd.AddValue("bytes", "bytes each sender sends per round", bytes);
    cmd.AddValue("minRto", "TCP minimum RTO (ms)", minRtoMs);
    cmd.AddValue("buffer", "drop-tail buffer of the router's egress ports (bytes)", buffer);
    cmd.AddValue("rate", "link rate", rate);
    cmd.AddValue("delay", "one-way link delay", delay);
    cmd.AddValue("prr", "use ns-3's default PRR loss recovery instead of classic RFC 6675", prr);
    cmd.AddValue("verbose", "print one line per round on stderr", verbose);
    cmd.Parse(argc, argv);

    const uint32_t mss = 1460;
    const uint32_t socketBuf = uint32_t(std::max<uint64_t>(1 << 20, 4 * bytes));
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpNewReno::GetTypeId()));
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(prr ? TcpPrrRecovery::GetTypeId()
                                       : TcpClassicRecovery::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(socketBuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(socketBuf)); // never limits
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(100));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::LimitedTransmit", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(minRtoMs)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));

    // Node 0 is the receiver, 1..senders the senders (the engine's numbering), then the router.
    NodeContainer hosts;
    hosts.Create(senders + 1);
    Ptr<Node> router = CreateObject<Node>();
    InternetStackHelper stack;
    stack.Install(hosts);
    stack.Install(router);

    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", StringValue(rate));
    p2p.SetChannelAttribute("Delay", StringValue(delay));
    // Host-side device queues: large (the engine's NICs are unlimited), so hosts never drop.
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("100000p"));

    TrafficControlHelper tch;
    std::vector<Ptr<PointToPointNetDevice>> hostDev(senders + 1);
    std::vector<Ptr<PointToPointNetDevice>> routerDev(senders + 1);
    Ipv4Address receiverAddr;
    for (uint32_t i = 0; i <= senders; ++i)
    {
        NetDeviceContainer link = p2p.Install(hosts.Get(i), router);
        Ipv4AddressHelper addr;
        std::string net = "10." + std::to_string(1 + i / 256) + "." + std::to_string(i % 256) + ".0";
        addr.SetBase(net.c_str(), "255.255.255.0");
        Ipv4InterfaceContainer ifs = addr.Assign(link);
        if (i == 0)
        {
            receiverAddr = ifs.GetAddress(0);
        }
        // How the router's buffer is set up (and what ns-3 counts):
        // Ipv4AddressHelper::Assign has just installed ns-3's default queue disc (FqCoDel) on both
        // devices; we remove it, so each device has only its DropTailQueue and TCP/IP hands
        // packets straight to it. On every router egress port (the one toward the receiver is the
        // bottleneck; the others carry ACKs, as the engine gives every switch port the same
        // buffer) that queue is limited to --buffer bytes. ns-3 counts in it the frames *waiting*
        // behind the one being serialised (the device dequeues a frame when it starts sending
        // it), each frame's size including its 2-byte PPP header: 1502 bytes for a full segment.
        // The device's flow control (NetDeviceQueueInterface) stops the queue once less than one
        // MTU (1500 B) is free, after which the traffic-control layer drops arriving packets
        // ("TcDrop"); a packet that does not fit is dropped by the queue itself. Both are counted
        // in drops=. With 65,536 B that is 43 full frames waiting (64,586 B) plus one on the wire,
        // 44 packets in all; the engine drops an arrival when the backlog still to serialise (the
        // unsent part of the packet on the wire included) exceeds the buffer, i.e. holds 44 to 45
        // full packets: the same total buffering to within one packet.
        tch.Uninstall(link);
        hostDev[i] = DynamicCast<PointToPointNetDevice>(link.Get(0));
        routerDev[i] = DynamicCast<PointToPointNetDevice>(link.Get(1));
        routerDev[i]->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, buffer));
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    Incast incast(senders, rounds, bytes);
    incast.m_verbose = verbose;
    const uint16_t port = 5001;
    incast.Listen(hosts.Get(0), port);
    for (uint32_t i = 1; i <= senders; ++i)
    {
        incast.Connect(hosts.Get(i), receiverAddr, port);
        hostDev[i]->TraceConnectWithoutContext(
            "PhyTxBegin",
            MakeCallback(&Incast::SenderTx, &incast).Bind(i - 1));
    }
    hostDev[0]->TraceConnectWithoutContext("MacRx", MakeCallback(&Incast::ReceiverRx, &incast));
    for (uint32_t i = 0; i <= senders; ++i)
    {
        routerDev[i]->GetQueue()->TraceConnectWithoutContext(
            "Drop",
            MakeCallback(&Incast::QueueDrop, &incast));
    }
    if (verbose)
    {
        routerDev[0]->GetQueue()->TraceConnectWithoutContext(
            "BytesInQueue",
            MakeCallback(&Incast::BottleneckBytes, &incast));
        routerDev[0]->GetQueue()->TraceConnectWithoutContext(
            "PacketsInQueue",
            MakeCallback(&Incast::BottleneckPackets, &incast));
    }
    router->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
        "TcDrop",
        MakeCallback(&Incast::TcDrop, &incast));

    Simulator::Stop(Seconds(3600));
    auto t1 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto t2 = std::chrono::steady_clock::now();
    const uint64_t events = Simulator::GetEventCount();

    uint64_t hostDrops = 0; // expected 0: host queues are large
    for (uint32_t i = 0; i <= senders; ++i)
    {
        hostDrops += hostDev[i]->GetQueue()->GetTotalDroppedPackets();
    }
    const uint64_t drops = incast.m_drops + hostDrops;
    const double simTime = (incast.m_lastRoundEnd - incast.m_firstRoundStart).GetSeconds();
    const double handshake = incast.m_firstRoundStart.GetSeconds();
    const bool finished = incast.m_finished;
    if (verbose)
    {
        std::fprintf(stderr,
                     "timeouts by the state they interrupted: open=%llu disorder=%llu "
                     "recovery=%llu (loss->loss not traced); largest queue toward the receiver: "
                     "%u B in %u packets waiting (plus one on the wire)\n",
                     (unsigned long long)incast.m_lossFrom[TcpSocketState::CA_OPEN],
                     (unsigned long long)incast.m_lossFrom[TcpSocketState::CA_DISORDER],
                     (unsigned long long)incast.m_lossFrom[TcpSocketState::CA_RECOVERY],
                     incast.m_maxQueueBytes,
                     incast.m_maxQueuePackets);
    }
    Simulator::Destroy();

    const double setup = std::chrono::duration<double>(t1 - t0).count();
    const double run = std::chrono::duration<double>(t2 - t1).count();
    std::printf("RESULT sim=ns3-cxx-incast bytes_rx=%llu rx_pkts=%llu tx_data_pkts=%llu events=%llu "
                "sim_time_s=%.6f run_s=%.4f pkts_per_s=%.0f events_per_s=%.0f drops=%llu "
                "retransmits=%llu timeouts=%llu fast_recoveries=%llu rounds=%u senders=%u "
                "handshake_s=%.6f setup_s=%.4f finished=%d\n",
                (unsigned long long)incast.m_bytesRx,
                (unsigned long long)incast.m_rxDataPkts,
                (unsigned long long)incast.m_txDataPkts,
                (unsigned long long)events,
                simTime,
                run,
                incast.m_txDataPkts / run,
                events / run,
                (unsigned long long)drops,
                (unsigned long long)incast.m_retransmits,
                (unsigned long long)incast.m_timeouts,
                (unsigned long long)incast.m_fastRecoveries,
                incast.m_roundsStarted,
                senders,
                handshake,
                setup,
                finished ? 1 : 0);
    return finished ? 0 : 1;
}
