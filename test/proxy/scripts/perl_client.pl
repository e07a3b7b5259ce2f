#!/usr/bin/perl
# Cache::Memcached through the proxy (test/proxy); see py_client.py.
# usage: perl_client.pl ADDR SECONDS PREFIX
# Prints "LOST T" per stale read, "ERR T" per failed write and "UNSURE T"
# per miss of a key whose last write failed, as py_client.py does; exits 1 when the
# functional pass failed or a request got an error.
use strict;
use warnings;
use Cache::Memcached;
use Time::HiRes qw(time);

my ($addr, $seconds, $prefix) = @ARGV;
my $c = Cache::Memcached->new({servers => [$addr], connect_timeout => 15, select_timeout => 15, no_rehash => 1});
my $func = "ok";
eval {
    my $k = "$prefix:f";
    $c->set($k, "v1") or die "set\n";
    ($c->get($k) // '') eq "v1" or die "get\n";
    my @keys = map { "$prefix:m$_" } 0..29;
    $c->set($keys[$_], "m$_") for 0..29;
    my $got = $c->get_multi(@keys, "$prefix:absent");
    (scalar(keys %$got) == 30 && !grep { ($got->{$keys[$_]} // '') ne "m$_" } 0..29) or die "get_multi\n";
    $c->delete($k) or die "delete\n";
    !defined($c->get($k)) or die "get after delete\n";
    $c->add($k, "1") or die "add\n";
    !$c->add($k, "2") or die "add existing\n";
    $c->append($k, "0") or die "append\n";
    ($c->incr($k, 5) // -1) == 15 or die "incr\n";
    ($c->decr($k, 20) // -1) == 0 or die "decr\n";
    1;
} or do { chomp(my $e = $@); $func = "FAIL:$e"; };

my (%acked, %acked_at, @lost, %maybe, @err_at, @unsure_at); # %maybe: a failed write may still have been applied
my @keys = map { "$prefix:k$_" } 0..99;
my ($ops, $errors, $stale, $maxlat, $i) = (0, 0, 0, 0, 0);
my @notes;
my $end = time() + $seconds;
while (time() < $end) {
    my $k = $keys[$i % 100];
    $i++;
    my $t0 = time();
    my $v = "$k:$i";
    $maybe{$k} = $v;
    if ($c->set($k, $v)) { $acked{$k} = $v; $acked_at{$k} = time(); delete $maybe{$k} } else { $errors++; push @err_at, time(); push @notes, "set $k failed" }
    my $got = $c->get($k);
    if (exists $maybe{$k} && defined $got && $got eq $maybe{$k}) { $acked{$k} = delete $maybe{$k} }
    if (exists $maybe{$k} && !defined $got) { push @unsure_at, time() }
    elsif (exists $acked{$k} && ($got // '<undef>') ne $acked{$k}) { $stale++; push @lost, $acked_at{$k}; push @notes, "get $k = " . ($got // 'undef') . " want $acked{$k}" }
    if ($i % 10 == 0) {
        my $b = int($i / 10) % 10 * 10;
        my @ks = @keys[$b .. $b + 9];
        my $m = $c->get_multi(@ks);
        for my $kk (@ks) {
            if (exists $maybe{$kk} && defined $m->{$kk} && $m->{$kk} eq $maybe{$kk}) { $acked{$kk} = delete $maybe{$kk} }
            if (exists $maybe{$kk} && !defined $m->{$kk}) { push @unsure_at, time() }
            elsif (exists $acked{$kk} && ($m->{$kk} // '<undef>') ne $acked{$kk}) { $stale++; push @lost, $acked_at{$kk}; push @notes, "get_multi $kk" }
        }
    }
    $ops++;
    my $lat = time() - $t0;
    $maxlat = $lat if $lat > $maxlat;
}
printf "cache-memcached functional=%s ops=%d errors=%d stale=%d maxlat_ms=%d\n", $func, $ops, $errors, $stale, $maxlat * 1000;
print "   $_\n" for @notes[0 .. ($#notes < 9 ? $#notes : 9)];
printf "LOST %.6f\n", $_ for @lost;
printf "ERR %.6f\n", $_ for @err_at;
printf "UNSURE %.6f\n", $_ for @unsure_at;
exit($func eq "ok" ? 0 : 1);
