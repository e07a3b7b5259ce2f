#!/usr/bin/perl
# Exercise a cache node with Cache::Memcached; exit non-zero on any wrong
# result.  usage: cache_memcached_check.pl HOST:PORT
use strict;
use warnings;
use Cache::Memcached;
use IO::Select;

my $addr = shift or die "usage: $0 HOST:PORT\n";
my $mc = Cache::Memcached->new({ servers => [$addr], connect_timeout => 5, select_timeout => 5 });
my $p = "perl:";

sub check {
    my ($what, $got, $want) = @_;
    $got  = defined $got  ? $got  : "<undef>";
    $want = defined $want ? $want : "<undef>";
    if ($got ne $want) {
        print STDERR "FAIL $what: got '$got', want '$want'\n";
        exit 1;
    }
}

check("set",          $mc->set("${p}a", "alpha"), 1);
check("get",          $mc->get("${p}a"), "alpha");
check("get miss",     $mc->get("${p}missing"), undef);
check("add existing", $mc->add("${p}a", "x") ? 1 : 0, 0);
check("add new",      $mc->add("${p}b", "beta"), 1);
check("replace",      $mc->replace("${p}b", "BETA"), 1);
check("replace miss", $mc->replace("${p}zz", "x") ? 1 : 0, 0);
check("append",       $mc->append("${p}b", "-end"), 1);
check("prepend",      $mc->prepend("${p}b", "start-"), 1);
check("get appended", $mc->get("${p}b"), "start-BETA-end");

my $bin = join("", map { chr } 0 .. 255) . "\r\nEND\r\n";
check("set binary", $mc->set("${p}bin", $bin), 1);
check("get binary", $mc->get("${p}bin"), $bin);

my $ref = { list => [1, 2, 3], name => "x" };
check("set ref", $mc->set("${p}ref", $ref), 1);
my $r = $mc->get("${p}ref");
check("get ref", join(",", @{ $r->{list} }) . $r->{name}, "1,2,3x");

my %many;
$many{"${p}m$_"} = "value-$_" for 0 .. 99;
$mc->set($_, $many{$_}) for keys %many;
my $got = $mc->get_multi(keys %many, "${p}nope");
check("get_multi count", scalar(keys %$got), 100);
check("get_multi value", $got->{"${p}m42"}, "value-42");
check("get_multi miss", exists $got->{"${p}nope"} ? 1 : 0, 0);

# Cache::Memcached 1.30 has no gets/cas/touch: speak them over the
# module's own socket for the key (it is non-blocking, hence IO::Select).
sub raw {
    my ($key, $payload, $end) = @_;
    my $sock = $mc->get_sock($key) or die "no socket for $key\n";
    syswrite($sock, $payload);
    my $reply = "";
    my $sel = IO::Select->new($sock);
    for (1 .. 100) {
        last if $reply =~ $end;
        next unless $sel->can_read(0.1);
        my $n = sysread($sock, my $buf, 65536);
        last if defined $n && $n == 0;
        $reply .= $buf if $n;
    }
    return $reply;
}

my $g = raw("${p}a", "gets ${p}a\r\n", qr/END\r\n$/);
$g =~ /^VALUE \Q${p}a\E 0 5 (\d+)\r\nalpha\r\nEND\r\n$/ or do { print STDERR "FAIL gets: '$g'\n"; exit 1 };
my $cas = $1;
check("cas ok", raw("${p}a", "cas ${p}a 0 0 6 $cas\r\nalpha2\r\n", qr/\r\n$/), "STORED\r\n");
check("cas stale", raw("${p}a", "cas ${p}a 0 0 6 $cas\r\nalpha3\r\n", qr/\r\n$/), "EXISTS\r\n");
check("after cas", $mc->get("${p}a"), "alpha2");
check("touch", raw("${p}a", "touch ${p}a 100\r\n", qr/\r\n$/), "TOUCHED\r\n");
check("touch missing", raw("${p}a", "touch ${p}nokey 100\r\n", qr/\r\n$/), "NOT_FOUND\r\n");

$mc->set("${p}n", 10);
check("incr", $mc->incr("${p}n", 5), 15);
check("decr", $mc->decr("${p}n", 20), 0);
check("incr missing", $mc->incr("${p}nokey", 1), undef);
$mc->set("${p}n", 100);
check("decr shrink", $mc->decr("${p}n", 1), 99);

check("delete", $mc->delete("${p}a"), 1);
check("delete miss", $mc->delete("${p}a") ? 1 : 0, 0);
check("get deleted", $mc->get("${p}a"), undef);

my $stats = $mc->stats(["misc"]);
check("stats curr_items present", defined $stats->{hosts}{$addr}{misc}{curr_items} ? 1 : 0, 1);
check("flush_all", $mc->flush_all ? 1 : 0, 1);
check("get after flush", $mc->get("${p}b"), undef);
print "Cache::Memcached: ok\n";
exit 0;
