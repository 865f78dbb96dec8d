#include <gtest/gtest.h>
TEST(Deck, Placeholder) { SUCCEED(); }
