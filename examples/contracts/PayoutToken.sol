// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// @title PayoutToken: a small ERC-20 whose treasury pays each payout once.
/// @notice The whole supply is minted to the treasury (the deployer). `payout` moves
///         `amount` from the treasury to `to` under a payout id, at most once per id;
///         `paid(id)` and the `Paid` event say whether an id was paid.
contract PayoutToken {
    string public constant name = "Payout Token";
    string public constant symbol = "PAY";
    uint8 public constant decimals = 18;

    address public immutable treasury;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    mapping(bytes32 => bool) public paid;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event Paid(bytes32 indexed payoutId, address indexed to, uint256 amount);

    constructor(uint256 supply) {
        treasury = msg.sender;
        totalSupply = supply;
        balanceOf[msg.sender] = supply;
        emit Transfer(address(0), msg.sender, supply);
    }

    /// @notice Pay `amount` to `to` under `payoutId`, once. Only the treasury pays.
    function payout(bytes32 payoutId, address to, uint256 amount) external {
        require(msg.sender == treasury, "not treasury");
        require(!paid[payoutId], "already paid");
        require(to != address(0), "zero recipient");
        require(balanceOf[treasury] >= amount, "treasury empty");
        paid[payoutId] = true;
        _move(treasury, to, amount);
        emit Paid(payoutId, to, amount);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        require(allowed >= value, "allowance exceeded");
        if (allowed != type(uint256).max) allowance[from][msg.sender] = allowed - value;
        _move(from, to, value);
        return true;
    }

    function _move(address from, address to, uint256 value) private {
        require(to != address(0), "zero recipient");
        require(balanceOf[from] >= value, "balance too low");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
