#!/usr/bin/perl
# Cache::Memcached side of test/interop: write or read every key of KEYFILE.
#
# usage: perl_keys.pl write|read modulo|rehash SERVERS KEYFILE
# SERVERS is "host:port[:weight],..."; a weight becomes ["host:port", w].
# "modulo" sets no_rehash; "rehash" lets Cache::Memcached move keys off a
# dead server. Values are "v:".key.
use strict;
use warnings;
use Cache::Memcached;

my ($mode, $dist, $servers, $keyfile) = @ARGV;
my @servers = map {
    my @p = split /:/;
    @p == 3 ? ["$p[0]:$p[1]", $p[2]] : "$p[0]:$p[1]";
} split /,/, $servers;
my $m = Cache::Memcached->new({servers => \@servers, no_rehash => ($dist eq 'rehash' ? 0 : 1),
                               connect_timeout => 1, select_timeout => 2});
open(my $fh, '<:raw', $keyfile) or die "$keyfile: $!";
my @keys = grep { length } map { chomp; $_ } <$fh>;
my $bad = 0;
for my $k (@keys) {
    if ($mode eq 'write') {
        unless ($m->set($k, "v:$k")) { print "set failed: $k\n"; $bad++; }
    } else {
        my $v = $m->get($k);
        unless (defined $v && $v eq "v:$k") { print "missing: $k\n"; $bad++; }
    }
}
printf("Cache::Memcached %s %s: %d keys, %d bad\n", $mode, $dist, scalar(@keys), $bad);
exit($bad ? 1 : 0);
